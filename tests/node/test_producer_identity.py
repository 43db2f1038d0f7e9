"""A client's producer identity leaves no hole in its numbers when an append is given up."""

from __future__ import annotations

import asyncio

import pytest

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
    identity.give_up(42, "a", seq, WriteOutcome.NOT_WRITTEN)
    assert identity.producer_id == 42
    assert identity.next_sequence("a") == seq


@pytest.mark.parametrize(
    ("then", "outcome"),
    [("b", WriteOutcome.UNKNOWN), ("a", WriteOutcome.NOT_WRITTEN)],
    ids=["may-be-in-the-log", "later-ones-out"],
)
def test_a_number_that_cannot_be_given_back_leaves_its_producer_id_behind(
    then: str, outcome: WriteOutcome
) -> None:
    """An append that may be in the log, or one with a later number of its channel
    out: its number cannot be reused, so every channel starts over under a new id."""
    identity = ProducerIdentity(42)
    seq = identity.next_sequence("a")
    identity.next_sequence(then)
    identity.give_up(42, "a", seq, outcome)
    assert identity.producer_id != 42
    assert identity.next_sequence("a") == 0
    assert identity.next_sequence("b") == 0


async def test_a_batch_waits_while_the_numbers_in_flight_would_span_more_than_the_window() -> None:
    identity = ProducerIdentity(42, window=100)
    assert await identity.reserve("a", 40) == (42, 0)
    assert await identity.reserve("a", 40) == (42, 40)
    third = asyncio.create_task(identity.reserve("a", 40))  # 0..119: more than 100
    other = await identity.reserve("b", 40)  # another channel's numbers are its own
    await asyncio.sleep(0)
    assert other == (42, 0) and not third.done()
    identity.settle(42, "a", 40)  # the second answered: the first still holds 0..39
    await asyncio.sleep(0)
    assert not third.done()
    identity.settle(42, "a", 0)  # 80..119 alone: within the window
    assert await asyncio.wait_for(third, 1) == (42, 80)


async def test_a_batch_larger_than_the_window_goes_alone_and_a_fresh_id_waits_for_nothing() -> None:
    identity = ProducerIdentity(42, window=10)
    assert await identity.reserve("a", 25) == (42, 0)  # nothing in flight: it goes
    waiting = asyncio.create_task(identity.reserve("a", 1))
    await asyncio.sleep(0)
    assert not waiting.done()
    identity.renew()  # the old id's batch no longer holds the new id's numbers back
    identity.settle(42, "a", 0)
    producer_id, first = await asyncio.wait_for(waiting, 1)
    assert (producer_id != 42, first) == (True, 0)


async def test_reservations_on_a_channel_are_served_in_the_order_they_came() -> None:
    """A reservation that would fit waits behind one already waiting on its channel
    (appends numbered in turn keep the order they were made in); another channel's
    go on."""
    identity = ProducerIdentity(42, window=10)
    assert await identity.reserve("a", 8) == (42, 0)
    big = asyncio.create_task(identity.reserve("a", 5))  # 0..12: more than 10
    await asyncio.sleep(0)
    small = asyncio.create_task(identity.reserve("a", 1))  # 0..8 would fit
    await asyncio.sleep(0)
    assert not big.done() and not small.done()
    assert await asyncio.wait_for(identity.reserve("b", 1), 1) == (42, 0)
    identity.settle(42, "a", 0)
    assert await asyncio.wait_for(big, 1) == (42, 8)
    assert await asyncio.wait_for(small, 1) == (42, 13)
    assert identity._waiting == {}


async def test_a_cancelled_reservation_takes_nothing_and_holds_nobody_back() -> None:
    identity = ProducerIdentity(42, window=4)
    assert await identity.reserve("a", 4) == (42, 0)
    gone = asyncio.create_task(identity.reserve("a", 1))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    identity.settle(42, "a", 0)
    assert await asyncio.wait_for(identity.reserve("a", 1), 1) == (42, 4)
    assert identity._waiting == {}


def test_a_number_of_an_id_left_behind_is_not_handed_back() -> None:
    """Two appends of one identity fail: the first may be in the log, so the identity
    renews; the second, known not written, gives up its number of the old id. Handing
    that back would rewind the new id, whose same sequence a third append already took
    (and may have landed): the next append would carry that one's numbers, and the node
    would answer it with that one's position."""
    identity = ProducerIdentity(42)
    first = identity.next_sequence("a")
    second = identity.next_sequence("a")
    identity.give_up(42, "a", first, WriteOutcome.UNKNOWN)
    renewed = identity.producer_id
    assert renewed != 42
    assert [identity.next_sequence("a") for _ in range(second + 1)] == [0, 1]  # a third append's
    identity.give_up(42, "a", second, WriteOutcome.NOT_WRITTEN)
    assert identity.producer_id == renewed
    assert identity.next_sequence("a") == second + 1
