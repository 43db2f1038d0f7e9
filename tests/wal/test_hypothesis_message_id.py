"""Property tests of message-id serialization (hypothesis): lossless round trips, an
order that matches the log's, and arbitrary bytes or text that either parse or raise
:class:`~streamwal.errors.DecodeError`, nothing else."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamwal.adaptors.memory import MemoryMessageId
from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.errors import BackendMismatchError, DecodeError

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
PULSAR_IDS = st.builds(PulsarMessageId, INT64, INT64, INT32)
MEMORY_IDS = st.builds(MemoryMessageId, st.integers(min_value=0, max_value=2**64 - 1))


@given(PULSAR_IDS)
def test_pulsar_ids_round_trip_through_bytes_and_text(mid: PulsarMessageId) -> None:
    data = mid.to_bytes()
    assert len(data) == 20
    back = PulsarMessageId.from_bytes(data)
    assert back == mid and hash(back) == hash(mid)
    assert back.sort_key() == (mid.ledger, mid.entry, mid.batch_index)
    if mid.batch_index < 0 and mid.batch_index != -1:
        return  # the text form writes batch -1 (no batch) only as ledger:entry
    assert PulsarMessageId.parse(str(mid)) == mid


@given(PULSAR_IDS, PULSAR_IDS)
def test_pulsar_id_order_is_the_log_order(a: PulsarMessageId, b: PulsarMessageId) -> None:
    key_a, key_b = (a.ledger, a.entry, a.batch_index), (b.ledger, b.entry, b.batch_index)
    assert (a < b) == (key_a < key_b)
    assert (a == b) == (key_a == key_b)
    assert (a <= b) == (key_a <= key_b)


def _an_id_or_a_decode_error(
    from_bytes: Callable[[bytes], PulsarMessageId | MemoryMessageId], data: bytes, size: int
) -> None:
    """``data`` is an id that encodes back to the same bytes, or, only when it is not
    ``size`` bytes long, refused with :class:`DecodeError`."""
    try:
        mid = from_bytes(data)
    except DecodeError:
        assert len(data) != size
        return
    assert mid.to_bytes() == data


@given(st.binary(max_size=40))
def test_arbitrary_bytes_are_a_pulsar_id_or_a_decode_error(data: bytes) -> None:
    _an_id_or_a_decode_error(PulsarMessageId.from_bytes, data, 20)


@given(st.text(max_size=40))
def test_arbitrary_text_is_a_pulsar_id_or_a_decode_error(text: str) -> None:
    try:
        mid = PulsarMessageId.parse(text)
    except DecodeError:
        return
    assert PulsarMessageId.parse(str(mid)) == mid


@given(MEMORY_IDS, st.binary(max_size=12))
def test_memory_ids_round_trip_and_reject_other_lengths(mid: MemoryMessageId, data: bytes) -> None:
    assert MemoryMessageId.from_bytes(mid.to_bytes()) == mid
    _an_id_or_a_decode_error(MemoryMessageId.from_bytes, data, 8)


@given(PULSAR_IDS, MEMORY_IDS)
def test_ids_of_different_backends_never_compare(a: PulsarMessageId, b: MemoryMessageId) -> None:
    assert a != b
    with pytest.raises(BackendMismatchError):
        _ = a < b
