"""A client's producer identity leaves no hole in its numbers when an append is given up."""

from __future__ import annotations

from streamwal.errors import WriteOutcome
from streamwal.node.idempotence import ProducerIdentity


def test_numbers_count_per_channel() -> None:
    identity = ProducerIdentity(42)
    assert [identity.next_sequence("a") for _ in range(3)] == [0, 1, 2]
    assert identity.next_sequence("b") == 0


def test_an_append_known_not_written_gives_its_number_back() -> None:
    identity = ProducerIdentity(42)
    identity.next_sequence("a")
    seq = identity.next_sequence("a")
    identity.give_up("a", seq, WriteOutcome.NOT_WRITTEN)
    assert identity.producer_id == 42
    assert identity.next_sequence("a") == seq


def test_an_append_that_may_be_in_the_log_leaves_its_producer_id_behind() -> None:
    identity = ProducerIdentity(42)
    seq = identity.next_sequence("a")
    identity.next_sequence("b")
    identity.give_up("a", seq, WriteOutcome.UNKNOWN)
    assert identity.producer_id != 42
    assert identity.next_sequence("a") == 0
    assert identity.next_sequence("b") == 0


def test_a_number_with_later_ones_out_cannot_be_given_back() -> None:
    identity = ProducerIdentity(42)
    first = identity.next_sequence("a")
    identity.next_sequence("a")
    identity.give_up("a", first, WriteOutcome.NOT_WRITTEN)
    assert identity.producer_id != 42
