"""``Scanner.next_batch`` against ``__anext__`` on generated logs (hypothesis).

A batch takes most messages by an inline path (in order, outside a transaction, none
held) and falls back to the general one for the rest; whatever the log, the messages,
their order and the watermark must be those that reading one by one gives, for every
vchannel filter, start policy and batch size; and so for a read of the backend
(a read-only WAL), where an entry is a pack of several messages (``append_many``) and a
batch takes the rest of a pack by that inline path too.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.wal import (
    WAL,
    DeliveryPolicy,
    ImmutableMessage,
    MessageType,
    MutableMessage,
    open_read_only,
    open_wal,
)
from streamwal.wal.message_id import MessageId
from streamwal.wal.scanner import Scanner
from tests.wal.testkit import BatchAllocator, CounterTSO, RecordingOpener, fast_config

_VCHANNELS = ("v1", "v2", "")
_READ_TIMEOUT_S = 2.0

# an operation: ("insert", vchannel), ("many", vchannels: one pack), ("begin",
# vchannel), ("txn_insert", which open transaction), ("commit" | "rollback", which open
# transaction)
_op = st.one_of(
    st.tuples(st.just("insert"), st.sampled_from(_VCHANNELS)),
    st.tuples(st.just("many"), st.lists(st.sampled_from(_VCHANNELS), min_size=2, max_size=6)),
    st.tuples(st.just("begin"), st.sampled_from(("v1", "v2"))),
    st.tuples(st.sampled_from(("txn_insert", "commit", "rollback")), st.integers(0, 3)),
)


async def _write(wal: WAL, ops: list[tuple[str, Any]]) -> tuple[list[int], MessageId]:
    """The operations' appends; the time ticks written, and the id of a last insert that
    every reader delivers."""
    open_txns: list[tuple[int, str]] = []  # (id, vchannel)
    ticks: list[int] = []
    for n, (kind, arg) in enumerate(ops):
        payload = b"%d" % n
        if kind == "insert":
            result = await wal.append(MutableMessage(MessageType.INSERT, payload, arg))
            ticks.append(result.time_tick)
        elif kind == "many":
            msgs = [MutableMessage(MessageType.INSERT, payload, vc) for vc in arg]
            ticks.extend(r.time_tick for r in await wal.append_many(msgs))
        elif kind == "begin":
            open_txns.append((await wal.begin_txn(arg), arg))
        elif open_txns:
            txn, txn_vchannel = open_txns[arg % len(open_txns)]
            if kind == "txn_insert":  # two at once: a pack inside the transaction
                msg = MutableMessage(MessageType.INSERT, payload, txn_vchannel).with_txn(txn)
                ticks.extend(r.time_tick for r in await wal.append_many([msg, msg]))
            else:
                open_txns.remove((txn, txn_vchannel))
                end = wal.commit_txn if kind == "commit" else wal.rollback_txn
                ticks.append((await end(txn)).time_tick)
    last = await wal.append(MutableMessage(MessageType.INSERT, b"last", ""))
    return ticks, last.message_id


async def _one_by_one(scanner: Scanner, last: MessageId) -> list[ImmutableMessage]:
    got = [await asyncio.wait_for(scanner.__anext__(), _READ_TIMEOUT_S)]
    while got[-1].message_id != last:
        got.append(await asyncio.wait_for(scanner.__anext__(), _READ_TIMEOUT_S))
    return got


async def _batched(scanner: Scanner, last: MessageId, limit: int) -> list[ImmutableMessage]:
    got: list[ImmutableMessage] = []
    while not got or got[-1].message_id != last:
        batch = await asyncio.wait_for(scanner.next_batch(limit), _READ_TIMEOUT_S)
        assert 1 <= len(batch) <= limit
        got.extend(batch)
    return got


async def _check(
    ops: list[tuple[str, Any]],
    vchannel: str | None,
    from_tick: int | None,
    limit: int,
    backend: bool = False,
) -> None:
    opener = RecordingOpener(MemoryLogStore())
    wal = await open_wal(opener, "batches", BatchAllocator(CounterTSO()), 1, fast_config())
    try:
        ticks, last = await _write(wal, ops)
        if from_tick is not None and ticks:
            policy = DeliveryPolicy.start_from_time_tick(ticks[from_tick % len(ticks)])
        else:
            policy = DeliveryPolicy.all()
        source = await open_read_only(opener, "batches", fast_config()) if backend else wal
        reference = await source.read(policy, vchannel)
        scanner = await source.read(policy, vchannel)
        try:
            expected = await _one_by_one(reference, last)
            assert await _batched(scanner, last, limit) == expected
            assert scanner.watermark == reference.watermark
            assert scanner.dropped_transactions == reference.dropped_transactions
        finally:
            await reference.close()
            await scanner.close()
            if source is not wal:
                await source.close()
    finally:
        await wal.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(_op, max_size=40),
    vchannel=st.sampled_from((None, "v1", "v2")),
    from_tick=st.none() | st.integers(0, 1000),
    limit=st.integers(1, 12),
    backend=st.booleans(),
)
def test_batches_are_what_one_by_one_reads_give(
    ops: list[tuple[str, Any]],
    vchannel: str | None,
    from_tick: int | None,
    limit: int,
    backend: bool,
) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_check(ops, vchannel, from_tick, limit, backend))
    finally:
        loop.close()
