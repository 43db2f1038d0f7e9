"""Transactions on the in-process backend: delivery at commit, rollback, expiry in TSO
time, LastConfirmed held at the begin, and a change of owner."""

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
)
from streamwal.wal import WAL, DeliveryPolicy, ImmutableMessage, MessageType, MutableMessage
from streamwal.wal.backend import BackendMessage
from streamwal.wal.scanner import Scanner
from tests.wal.testkit import CounterTSO, OpenOwner, log_messages, wait_until

VCHANNEL = "v1"


def _insert(payload: bytes, txn_id: int | None = None) -> MutableMessage:
    msg = MutableMessage(MessageType.INSERT, payload, VCHANNEL)
    return msg if txn_id is None else msg.with_txn(txn_id)


async def _take(scanner: Scanner, count: int) -> list[ImmutableMessage]:
    return [await asyncio.wait_for(scanner.__anext__(), 2.0) for _ in range(count)]


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
    await _take(scanner, 1)  # the first time tick
    txn = await wal.begin_txn(VCHANNEL)
    for payload in (b"t1", b"t2", b"t3"):
        await wal.append(_insert(payload, txn))
    await wal.append(_insert(b"plain"))
    assert _data(await _take(scanner, 1)) == [b"plain"]  # the transaction is held
    await _nothing_more(scanner)
    commit = await wal.commit_txn(txn)
    delivered = await _take(scanner, 5)
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
    wal = await open_owner()
    txn = await wal.begin_txn(VCHANNEL)
    await wal.append(_insert(b"t1", txn))
    await wal.rollback_txn(txn)
    await wal.append(_insert(b"after"))
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    delivered = await _take(scanner, 2)
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
    delivered = await _take(scanner, 6)
    assert _data(delivered) == [b"p0", b"p1", b"p2", b"in"]
    after = await wal.append(_insert(b"after"))
    by_id = {m.message_id: m for m in log_messages(store, channel)}
    assert by_id[after.message_id].last_confirmed > begin.message_id  # released at commit


async def test_a_transaction_without_keepalive_expires_in_tso_time(
    open_owner: OpenOwner, tso: CounterTSO, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    txn = await wal.begin_txn(VCHANNEL, keepalive=0.05)
    await wal.append(_insert(b"t1", txn))
    await wal.keepalive_txn(txn)
    await wal.append(_insert(b"plain"))  # TSO time has not moved: still open
    assert wal.open_transactions == 1
    await _advance_tso(wal, tso, 100)
    await wal.append(_insert(b"plain2"))
    with pytest.raises(TransactionExpiredError):
        await wal.commit_txn(txn)
    await wait_until(
        lambda: any(m.type is MessageType.ROLLBACK_TXN for m in log_messages(store, channel))
    )
    assert wal.open_transactions == 0
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    assert _data(await _take(scanner, 3)) == [b"plain", b"plain2"]


async def test_appends_keep_a_transaction_alive(open_owner: OpenOwner, tso: CounterTSO) -> None:
    wal = await open_owner()
    txn = await wal.begin_txn(VCHANNEL, keepalive=0.05)
    for i in range(3):
        await _advance_tso(wal, tso, 30)  # less than the keepalive since the last append
        await wal.append(_insert(f"t{i}".encode(), txn))
    await wal.commit_txn(txn)


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
    delivered = await _take(scanner, 3)  # the two first time ticks, then "new"
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
    delivered = await _take(scanner, 3)
    assert _data(delivered) == [b"new"]


async def test_commit_waits_for_the_appends_in_flight(
    open_owner: OpenOwner, store: MemoryLogStore
) -> None:
    wal = await open_owner()
    txn = await wal.begin_txn(VCHANNEL)
    store.faults.append_delay = 0.02
    pending = [asyncio.create_task(wal.append(_insert(f"t{i}".encode(), txn))) for i in range(3)]
    await asyncio.sleep(0)
    commit = await wal.commit_txn(txn)
    results = await asyncio.gather(*pending)
    assert all(r.message_id < commit.message_id for r in results)
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    assert len(_data(await _take(scanner, 6))) == 3


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
    await wal.commit_txn(txn)
    with pytest.raises(TransactionNotFoundError):
        await wal.commit_txn(txn)


async def test_one_span_per_transaction_from_begin_to_end(
    open_owner: OpenOwner, spans: Callable[[], list[ReadableSpan]]
) -> None:
    wal = await open_owner()
    committed = await wal.begin_txn(VCHANNEL)
    await wal.append(_insert(b"t1", committed))
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
    wal = await open_owner()
    txn = await wal.begin_txn(VCHANNEL)
    await wal.append(_insert(b"t1", txn))
    store.faults.lose_answers = 1
    with pytest.raises(OutcomeUnknownError):
        await wal.append(_insert(b"t2", txn))
    with pytest.raises(TransactionAbortedError, match="unknown outcome"):
        await wal.commit_txn(txn)
    log = log_messages(store, channel)
    assert [m.type for m in log if m.txn_id == txn][-1] is MessageType.ROLLBACK_TXN
    await wal.append(_insert(b"after"))
    scanner = await wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
    assert _data(await _take(scanner, 2)) == [b"after"]


async def test_nothing_goes_into_a_transaction_being_committed(
    open_owner: OpenOwner, store: MemoryLogStore
) -> None:
    wal = await open_owner()
    txn = await wal.begin_txn(VCHANNEL)
    store.faults.append_delay = 0.05
    pending = asyncio.create_task(wal.append(_insert(b"t1", txn)))
    await asyncio.sleep(0)
    commit = asyncio.create_task(wal.commit_txn(txn))
    await asyncio.sleep(0.01)
    with pytest.raises(TransactionError, match="commit is under way"):
        await wal.append(_insert(b"late", txn))
    await pending
    await commit
