"""Transactions on the in-process backend: delivery at commit, rollback, expiry in
elapsed time on the owner (whatever TSO time does), repeated commits and rollbacks,
LastConfirmed held at the begin, and a change of owner."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.errors import (
    ChannelFencedError,
    InvalidInputError,
    OutcomeUnknownError,
    TransactionAbortedError,
    TransactionError,
    TransactionExpiredError,
    TransactionNotFoundError,
    UnavailableError,
    WriteOutcome,
)
from streamwal.wal import WAL, DeliveryPolicy, ImmutableMessage, MessageType, MutableMessage
from streamwal.wal.backend import BackendMessage
from streamwal.wal.scanner import Scanner
from tests.wal.testkit import (
    CounterTSO,
    ManualClock,
    OpenOwner,
    log_messages,
    take,
    wait_until,
)

VCHANNEL = "v1"


def _insert(payload: bytes, txn_id: int | None = None) -> MutableMessage:
    msg = MutableMessage(MessageType.INSERT, payload, VCHANNEL)
    return msg if txn_id is None else msg.with_txn(txn_id)


async def _open_txn(
    open_owner: OpenOwner, *, keepalive: float | None = None, holding: bytes | None = b"t1"
) -> tuple[WAL, int]:
    """A new owner with a transaction begun on ``VCHANNEL`` that holds one insert,
    ``holding`` (``None``: nothing yet)."""
    wal = await open_owner()
    txn = await wal.begin_txn(VCHANNEL, keepalive=keepalive)
    if holding is not None:
        await wal.append(_insert(holding, txn))
    return wal, txn


async def _advance_tso(wal: WAL, tso: CounterTSO, ms: int) -> None:
    """TSO time moves ``ms`` milliseconds on (the allocator drops its cached batch)."""
    tso._next += ms << 18
    await wal.params.allocator.sync()


async def _nothing_more(scanner: Scanner) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(scanner.__anext__(), 0.1)


def _data(messages: list[ImmutableMessage]) -> list[bytes]:
    return [m.payload for m in messages if m.type is MessageType.INSERT]


async def test_a_transaction_is_delivered_at_its_commit_together_and_in_order(
    open_owner: OpenOwner,
) -> None:
    wal = await open_owner()
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    await take(scanner, 1)  # the first time tick
    txn = await wal.begin_txn(VCHANNEL)
    for payload in (b"t1", b"t2", b"t3"):
        await wal.append(_insert(payload, txn))
    await wal.append(_insert(b"plain"))
    assert _data(await take(scanner, 1)) == [b"plain"]  # the transaction is held
    await _nothing_more(scanner)
    commit = await wal.commit_txn(txn)
    delivered = await take(scanner, 5)
    assert [m.type for m in delivered] == [
        MessageType.BEGIN_TXN,
        MessageType.INSERT,
        MessageType.INSERT,
        MessageType.INSERT,
        MessageType.COMMIT_TXN,
    ]
    assert _data(delivered) == [b"t1", b"t2", b"t3"]
    assert delivered[-1].message_id == commit.message_id
    assert all(m.txn_id == txn for m in delivered[1:])
    assert delivered[-1].payload == b"3"  # the commit counts its messages


async def test_a_rolled_back_transaction_is_never_delivered(open_owner: OpenOwner) -> None:
    wal, txn = await _open_txn(open_owner)
    await wal.rollback_txn(txn)
    await wal.append(_insert(b"after"))
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    delivered = await take(scanner, 2)
    assert _data(delivered) == [b"after"]
    await _nothing_more(scanner)
    assert scanner.dropped_transactions == 1
    with pytest.raises(TransactionNotFoundError):
        await wal.append(_insert(b"late", txn))


async def test_last_confirmed_never_passes_the_begin_of_an_open_transaction(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    await wal.append(_insert(b"before"))
    txn = await wal.begin_txn(VCHANNEL)
    begin = next(m for m in log_messages(store, channel) if m.type is MessageType.BEGIN_TXN)
    await wal.append(_insert(b"in", txn))
    held = [await wal.append(_insert(f"p{i}".encode())) for i in range(3)]
    by_id = {m.message_id: m for m in log_messages(store, channel)}
    assert all(by_id[r.message_id].last_confirmed <= begin.message_id for r in held)
    # a reader that starts at a held LastConfirmed sees the transaction whole
    start = by_id[held[-1].message_id].last_confirmed
    scanner = await wal.read(DeliveryPolicy.start_from(start), vchannel=VCHANNEL)
    await wal.commit_txn(txn)
    delivered = await take(scanner, 6)
    assert _data(delivered) == [b"p0", b"p1", b"p2", b"in"]
    after = await wal.append(_insert(b"after"))
    by_id = {m.message_id: m for m in log_messages(store, channel)}
    assert by_id[after.message_id].last_confirmed > begin.message_id  # released at commit


async def test_a_transaction_without_keepalive_expires_in_elapsed_time(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    """Was "expires in TSO time" (TSO moved 100 ms on): the rule was the wrong one. Now
    elapsed time on the owner's clock passes the keepalive, TSO time does not matter."""
    clock = ManualClock()
    wal = await open_owner(clock=clock)
    txn = await wal.begin_txn(VCHANNEL, keepalive=0.05)
    await wal.append(_insert(b"t1", txn))
    await wal.keepalive_txn(txn)
    await wal.append(_insert(b"plain"))  # no time has passed: still open
    assert wal.open_transactions == 1
    clock.advance(0.1)
    await wal.append(_insert(b"plain2"))  # the round after the deadline expires it
    with pytest.raises(TransactionExpiredError):
        await wal.commit_txn(txn)
    await wait_until(
        lambda: any(m.type is MessageType.ROLLBACK_TXN for m in log_messages(store, channel))
    )
    assert wal.open_transactions == 0
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    assert _data(await take(scanner, 3)) == [b"plain", b"plain2"]


async def test_appends_keep_a_transaction_alive(open_owner: OpenOwner, tso: CounterTSO) -> None:
    clock = ManualClock()
    wal = await open_owner(clock=clock)
    txn = await wal.begin_txn(VCHANNEL, keepalive=0.05)
    for i in range(3):
        clock.advance(0.03)  # less than the keepalive since the last append
        await _advance_tso(wal, tso, 30)
        await wal.append(_insert(f"t{i}".encode(), txn))
    await wal.commit_txn(txn)


async def test_tso_jumps_do_not_expire_a_live_transaction(
    open_owner: OpenOwner, tso: CounterTSO
) -> None:
    """Timestamps come in cached blocks: TSO time jumps at each new block by far more
    than the keepalive. A transaction kept alive within its keepalive of elapsed time
    stays open, whatever the time ticks say."""
    clock = ManualClock()
    wal = await open_owner(clock=clock)
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    await take(scanner, 1)  # the first time tick
    txn = await wal.begin_txn(VCHANNEL, keepalive=1.5)
    for i in range(4):
        await _advance_tso(wal, tso, 60_000)  # a minute of TSO time at once
        clock.advance(1.0)
        await wal.append(_insert(f"plain{i}".encode()))  # carries the jump to the owner
        if i % 2:
            await wal.keepalive_txn(txn)
        else:
            await wal.append(_insert(f"t{i}".encode(), txn))
        assert wal.open_transactions == 1
    clock.advance(1.4)  # still within the keepalive since the last keepalive
    await _advance_tso(wal, tso, 60_000)
    commit = await wal.commit_txn(txn)
    delivered = await take(scanner, 8)
    assert _data(delivered) == [b"plain0", b"plain1", b"plain2", b"plain3", b"t0", b"t2"]
    assert delivered[-1].message_id == commit.message_id


async def test_a_dead_transaction_expires_while_tso_time_stands_still(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    """Within one cached block TSO time stands still: a transaction left alone for longer
    than its keepalive of elapsed time expires all the same, on its next call."""
    clock = ManualClock()
    wal = await open_owner(clock=clock)
    first_tick = log_messages(store, channel)[0].time_tick
    dead = await wal.begin_txn(VCHANNEL, keepalive=1.5)
    await wal.append(_insert(b"d1", dead))
    clock.advance(3.5)  # nothing at all in between: no time tick noticed it
    with pytest.raises(TransactionExpiredError):
        await wal.commit_txn(dead)
    for late in (wal.keepalive_txn(dead), wal.append(_insert(b"d2", dead))):
        with pytest.raises(TransactionExpiredError):
            await late
    assert wal.open_transactions == 0
    log = log_messages(store, channel)
    assert (log[-1].time_tick - first_tick) >> 18 == 0  # TSO time did not move a millisecond
    await wait_until(
        lambda: any(m.type is MessageType.ROLLBACK_TXN for m in log_messages(store, channel))
    )
    assert not any(m.type is MessageType.COMMIT_TXN for m in log_messages(store, channel))
    await wal.append(_insert(b"after"))
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    assert _data(await take(scanner, 2)) == [b"after"]
    await _nothing_more(scanner)
    assert scanner.dropped_transactions == 1


async def test_a_change_of_owner_ends_the_transactions_in_flight(
    open_owner: OpenOwner,
) -> None:
    old = await open_owner(node_id=1)
    txn = await old.begin_txn(VCHANNEL)
    await old.append(_insert(b"cut", txn))
    new = await open_owner(node_id=2)
    with pytest.raises(ChannelFencedError):
        await old.commit_txn(txn)
    with pytest.raises(TransactionAbortedError):
        await old.commit_txn(txn)
    with pytest.raises(TransactionNotFoundError):
        await new.commit_txn(txn)
    await new.append(_insert(b"new"))
    scanner = await new.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    delivered = await take(scanner, 3)  # the two first time ticks, then "new"
    assert b"cut" not in _data(delivered)
    assert b"new" in _data(delivered)


async def test_a_deposed_owners_commit_behind_the_new_first_time_tick_is_not_delivered(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    """Milvus #53368: without a real fence, an old owner's commit could land after the
    new owner's first time tick. A reader drops the transaction at that time tick."""
    old = await open_owner(node_id=1)
    txn = await old.begin_txn(VCHANNEL)
    await old.append(_insert(b"cut", txn))
    new = await open_owner(node_id=2)
    log = log_messages(store, channel)
    late_commit = {
        "_t": "CommitTxn",
        "_v": "1",
        "_tt": str(log[-1].time_tick + 1),
        "_src": "1",
        "_vc": VCHANNEL,
        "_tx": str(txn),
        "_lc": log[0].message_id.to_bytes().hex(),
    }
    offset = len(store.entries(channel))
    store.log(channel).entries.append(BackendMessage(MemoryMessageId(offset), b"1", late_commit))
    await new.append(_insert(b"new"))
    scanner = await new.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    delivered = await take(scanner, 3)
    assert _data(delivered) == [b"new"]


async def test_commit_waits_for_the_appends_in_flight(
    open_owner: OpenOwner, store: MemoryLogStore
) -> None:
    wal, txn = await _open_txn(open_owner, holding=None)
    store.faults.append_delay = 0.02
    pending = [asyncio.create_task(wal.append(_insert(f"t{i}".encode(), txn))) for i in range(3)]
    await asyncio.sleep(0)
    commit = await wal.commit_txn(txn)
    results = await asyncio.gather(*pending)
    assert all(r.message_id < commit.message_id for r in results)
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    assert len(_data(await take(scanner, 6))) == 3


async def test_bad_transaction_calls_get_typed_errors(open_owner: OpenOwner) -> None:
    wal = await open_owner()
    with pytest.raises(TransactionNotFoundError):
        await wal.append(_insert(b"x", 12345))
    with pytest.raises(TransactionNotFoundError):
        await wal.commit_txn(12345)
    txn = await wal.begin_txn(VCHANNEL)
    with pytest.raises(InvalidInputError):
        await wal.append(MutableMessage(MessageType.INSERT, b"x", "other").with_txn(txn))
    with pytest.raises(InvalidInputError):
        await wal.append(MutableMessage(MessageType.COMMIT_TXN, b"0", VCHANNEL, txn_id=txn))
    for keepalive in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError):
            await wal.begin_txn(VCHANNEL, keepalive=keepalive)
    first = await wal.commit_txn(txn)
    assert await wal.commit_txn(txn) == first  # was TransactionNotFoundError: now a repeat
    with pytest.raises(TransactionNotFoundError):
        await wal.rollback_txn(txn)


async def test_one_span_per_transaction_from_begin_to_end(
    open_owner: OpenOwner, spans: Callable[[], list[ReadableSpan]]
) -> None:
    wal, committed = await _open_txn(open_owner)
    await wal.commit_txn(committed)
    rolled_back = await wal.begin_txn(VCHANNEL)
    await wal.rollback_txn(rolled_back)
    ended = {
        s.attributes["wal.txn_id"]: s.attributes
        for s in spans()
        if s.name == "wal.txn" and s.attributes is not None
    }
    assert ended[committed]["wal.txn.outcome"] == "committed"
    assert ended[committed]["wal.txn.messages"] == 1
    assert ended[rolled_back]["wal.txn.outcome"] == "rolled_back"


async def test_an_append_of_unknown_outcome_forbids_the_commit(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal, txn = await _open_txn(open_owner)
    store.faults.lose_answers = 1
    with pytest.raises(OutcomeUnknownError):
        await wal.append(_insert(b"t2", txn))
    with pytest.raises(TransactionAbortedError, match="unknown outcome"):
        await wal.commit_txn(txn)
    log = log_messages(store, channel)
    assert [m.type for m in log if m.txn_id == txn][-1] is MessageType.ROLLBACK_TXN
    await wal.append(_insert(b"after"))
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    assert _data(await take(scanner, 2)) == [b"after"]


async def test_nothing_goes_into_a_transaction_being_committed(
    open_owner: OpenOwner, store: MemoryLogStore
) -> None:
    wal, txn = await _open_txn(open_owner, holding=None)
    store.faults.append_delay = 0.05
    pending = asyncio.create_task(wal.append(_insert(b"t1", txn)))
    await asyncio.sleep(0)
    commit = asyncio.create_task(wal.commit_txn(txn))
    await asyncio.sleep(0.01)
    with pytest.raises(TransactionError, match="commit is under way"):
        await wal.append(_insert(b"late", txn))
    await pending
    await commit


async def test_a_repeated_commit_or_rollback_is_answered_with_the_first_result(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal, txn = await _open_txn(open_owner)
    store.faults.append_delay = 0.02
    first, concurrent = await asyncio.gather(wal.commit_txn(txn), wal.commit_txn(txn))
    store.faults.append_delay = 0.0
    assert concurrent == first  # a repeat during the commit waits for it
    assert await wal.commit_txn(txn) == first
    dropped = await wal.begin_txn(VCHANNEL)
    store.faults.fail_appends = 100
    with pytest.raises(UnavailableError):  # not written: a repeat writes it
        await wal.rollback_txn(dropped)
    store.faults.fail_appends = 0
    store.faults.append_delay = 0.02
    rolled_back, concurrent_rollback = await asyncio.gather(
        wal.rollback_txn(dropped), wal.rollback_txn(dropped)
    )
    store.faults.append_delay = 0.0
    assert concurrent_rollback == rolled_back
    assert await wal.rollback_txn(dropped) == rolled_back
    log = log_messages(store, channel)
    assert [m.type for m in log if m.txn_id == txn].count(MessageType.COMMIT_TXN) == 1
    assert [m.type for m in log if m.txn_id == dropped] == [MessageType.ROLLBACK_TXN]
    with pytest.raises(TransactionNotFoundError):
        await wal.commit_txn(dropped)


async def test_a_commit_not_written_may_be_retried(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal, txn = await _open_txn(open_owner)
    store.faults.fail_appends = 100
    with pytest.raises(UnavailableError) as refused:  # the append's retries ran out
        await wal.commit_txn(txn)
    assert refused.value.outcome is WriteOutcome.NOT_WRITTEN
    store.faults.fail_appends = 0
    commit = await wal.commit_txn(txn)
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    delivered = await take(scanner, 4)
    assert _data(delivered) == [b"t1"]
    assert delivered[-1].message_id == commit.message_id


async def test_a_repeat_of_a_commit_of_unknown_outcome_says_it_may_be_in_the_log(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal, txn = await _open_txn(open_owner)
    store.faults.lose_answers = 1  # the commit lands; its answer is lost
    with pytest.raises(OutcomeUnknownError):
        await wal.commit_txn(txn)
    with pytest.raises(TransactionAbortedError, match="unknown outcome") as repeat:
        await wal.commit_txn(txn)
    assert repeat.value.outcome is WriteOutcome.UNKNOWN  # not "not written": it is there
    assert any(m.type is MessageType.COMMIT_TXN for m in log_messages(store, channel))


async def test_by_default_keepalive_is_measured_on_the_real_monotonic_clock(
    open_owner: OpenOwner,
) -> None:
    wal, txn = await _open_txn(open_owner, keepalive=0.05)
    await asyncio.sleep(0.1)  # TSO time stands still meanwhile: only the clock moves
    with pytest.raises(TransactionExpiredError):
        await wal.commit_txn(txn)
