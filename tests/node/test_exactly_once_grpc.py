"""Idempotent produce and transactions through the node's gRPC API (unit: the real
servicer and client over the in-process backend)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable

import grpc
import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.errors import WriteOutcome
from streamwal.node.client import Acked, AppendStream, NodeClient, policy
from streamwal.node.idempotence import ProducerIdentity
from streamwal.node.outcome import OUTCOME_KEY, write_outcome
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.wal.message import MessageType, decode
from tests.node.memory_node import CounterSource, assign_on, memory_node, read_from_start
from tests.wal.testkit import fast_config, log_messages

CHANNEL = "eos"


@pytest.fixture
async def node() -> AsyncIterator[tuple[str, MemoryLogStore]]:
    store = MemoryLogStore()
    async with memory_node(1, store, CounterSource()) as (address, _):
        yield address, store


@pytest.fixture
async def client(node: tuple[str, MemoryLogStore]) -> AsyncIterator[NodeClient]:
    """A client of the node, with ``CHANNEL`` assigned."""
    address, _ = node
    async with NodeClient(address, tracing=False) as connected:
        await connected.assign(CHANNEL)
        yield connected


def _log(store: MemoryLogStore) -> list[tuple[int | None, int | None, bytes]]:
    messages = [decode(raw, MemoryMessageId.from_bytes) for raw in store.entries(CHANNEL)]
    return [(m.producer_id, m.sequence, m.payload) for m in messages if m.payload]


async def test_a_retried_sequence_is_answered_with_the_first_result(
    node: tuple[str, MemoryLogStore], client: NodeClient
) -> None:
    _, store = node
    first = await client.produce(CHANNEL, b"a")
    again = await client.produce(CHANNEL, b"a", sequence=first.sequence)
    assert (again.message_id, again.time_tick) == (first.message_id, first.time_tick)
    assert _log(store) == [(first.producer_id, 0, b"a")]
    with pytest.raises(grpc.aio.AioRpcError) as gap:
        await client.produce(CHANNEL, b"b", sequence=5 + fast_config().idempotence_window)
    assert gap.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "skips ahead" in (gap.value.details() or "")


async def test_a_lost_answer_is_retried_by_the_client_and_lands_once(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    async with NodeClient(address, tracing=False, retries=2) as client:
        await client.assign(CHANNEL)
        store.faults.lose_answers = 1
        acked = await client.produce(CHANNEL, b"once")
        assert _log(store) == [(acked.producer_id, 0, b"once")]
        landed = store.entries(CHANNEL)[-1]
        assert acked.message_id == landed.message_id.to_bytes()


async def test_a_transaction_through_the_node(client: NodeClient) -> None:
    txn = await client.begin_txn(CHANNEL, "v", keepalive_s=30)
    await client.produce(CHANNEL, b"t1", vchannel="v", txn_id=txn)
    await client.keepalive_txn(CHANNEL, txn)
    await client.produce(CHANNEL, b"t2", vchannel="v", txn_id=txn)
    dropped = await client.begin_txn(CHANNEL, "v")
    await client.produce(CHANNEL, b"never", vchannel="v", txn_id=dropped)
    await client.rollback_txn(CHANNEL, dropped)
    commit = await client.commit_txn(CHANNEL, txn)
    read = await read_from_start(client, CHANNEL, 5, vchannel="v")
    assert [m.type for m in read[1:]] == ["BeginTxn", "insert", "insert", "CommitTxn"]
    assert [m.wal_record for m in read[1:]] == [True, False, False, True]
    assert [m.payload for m in read if m.type == "insert"] == [b"t1", b"t2"]
    assert all(m.txn_id == txn for m in read[2:])
    assert read[-1].message_id == commit.message_id
    # a repeated commit was ABORTED: now it is answered with the first result
    assert (await client.commit_txn(CHANNEL, txn)).message_id == commit.message_id
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await client.commit_txn(CHANNEL, dropped)
    assert ended.value.code() == grpc.StatusCode.ABORTED
    # a caller's "CommitTxn" is the caller's message (log format v2), not a marker
    mine = await client.produce(CHANNEL, b"x", type="CommitTxn", vchannel="v")
    async for got in client.consume(CHANNEL, policy("all"), vchannel="v", timeout=5):
        if got.message_id == mine.message_id:
            break
    assert (got.type, got.wal_record, got.txn_id) == ("CommitTxn", False, None)


async def test_bad_numbers_and_unknown_transactions_get_typed_codes(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.StreamingNodeStub(channel)
        await assign_on(address, CHANNEL)
        before = len(store.entries(CHANNEL))
        message = pb.Message(type="insert", payload=b"x")
        cases = [
            (stub.Produce(pb.ProduceRequest(pchannel=CHANNEL, message=message, sequence=1)),
             grpc.StatusCode.INVALID_ARGUMENT),  # a sequence without a producer id
            (stub.Produce(pb.ProduceRequest(pchannel=CHANNEL, message=message, txn_id=99)),
             grpc.StatusCode.ABORTED),
            (stub.CommitTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=0)), grpc.StatusCode.ABORTED),
            (stub.KeepAliveTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=2**64 - 1)),
             grpc.StatusCode.ABORTED),
            (stub.BeginTxn(pb.BeginTxnRequest(pchannel=CHANNEL, keepalive_s=float("nan"))),
             grpc.StatusCode.INVALID_ARGUMENT),
            (stub.BeginTxn(pb.BeginTxnRequest(pchannel="nowhere")), grpc.StatusCode.NOT_FOUND),
        ]  # fmt: skip
        for call, code in cases:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert err.value.code() == code, err.value.details()
        assert len(store.entries(CHANNEL)) == before  # nothing written by any of them


def _outcome_in_trailer(err: grpc.aio.AioRpcError) -> str | None:
    return next((value for key, value in err.trailing_metadata() or () if key == OUTCOME_KEY), None)


async def test_commit_and_rollback_answer_their_outcome_and_repeats_their_first_result(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    await assign_on(address, CHANNEL)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.StreamingNodeStub(channel)

        async def begin_with(payload: bytes) -> int:
            txn = (await stub.BeginTxn(pb.BeginTxnRequest(pchannel=CHANNEL, vchannel="v"))).txn_id
            message = pb.Message(type="insert", payload=payload, vchannel="v")
            await stub.Produce(pb.ProduceRequest(pchannel=CHANNEL, message=message, txn_id=txn))
            return int(txn)

        async def failure(call: Awaitable[object]) -> grpc.aio.AioRpcError:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            return err.value

        kept = await begin_with(b"kept")
        first = await stub.CommitTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=kept))
        again = await stub.CommitTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=kept))
        assert (again.message_id, again.time_tick) == (first.message_id, first.time_tick)
        dropped = await begin_with(b"dropped")
        undone = await stub.RollbackTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=dropped))
        redone = await stub.RollbackTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=dropped))
        assert (redone.message_id, redone.time_tick) == (undone.message_id, undone.time_tick)
        markers = [decode(raw, MemoryMessageId.from_bytes).type for raw in store.entries(CHANNEL)]
        assert markers.count(MessageType.COMMIT_TXN) == 1
        assert markers.count(MessageType.ROLLBACK_TXN) == 1

        # wrote nothing: ABORTED (an unknown transaction) or NOT_FOUND (no such channel)
        for call, code in [
            (stub.CommitTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=12345)),
             grpc.StatusCode.ABORTED),
            (stub.RollbackTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=12345)),
             grpc.StatusCode.ABORTED),
            (stub.CommitTxn(pb.TxnRequest(pchannel="nowhere", txn_id=kept)),
             grpc.StatusCode.NOT_FOUND),
        ]:  # fmt: skip
            err = await failure(call)
            assert err.code() == code, err.details()
            assert _outcome_in_trailer(err) == "not-written"
            assert write_outcome(err) is WriteOutcome.NOT_WRITTEN

        # the commit lands and its answer is lost: it and its repeat say "unknown"
        lost = await begin_with(b"lost")
        store.faults.lose_answers = 1
        err = await failure(stub.CommitTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=lost)))
        assert err.code() == grpc.StatusCode.UNKNOWN
        assert _outcome_in_trailer(err) == "unknown"
        err = await failure(stub.CommitTxn(pb.TxnRequest(pchannel=CHANNEL, txn_id=lost)))
        assert err.code() == grpc.StatusCode.ABORTED
        assert _outcome_in_trailer(err) == "unknown"
        assert write_outcome(err) is WriteOutcome.UNKNOWN


@contextlib.asynccontextmanager
async def _window_of_16(store: MemoryLogStore) -> AsyncIterator[NodeClient]:
    """A client of one identity, the channel assigned, on a node that remembers 16
    numbers per producer."""
    config = fast_config(idempotence_window=16)
    async with memory_node(1, store, CounterSource(), config=config) as (address, _):
        identity = ProducerIdentity(window=16)
        async with NodeClient(address, tracing=False, producer=identity) as client:
            await client.assign(CHANNEL)
            yield client


def _each_once(store: MemoryLogStore, payloads: list[bytes]) -> None:
    """Every payload in the log once, numbered from 0 without a gap."""
    logged = [m for m in log_messages(store, CHANNEL) if m.payload]
    assert sorted(m.sequence for m in logged if m.sequence is not None) == list(
        range(len(payloads))
    )
    assert sorted(m.payload for m in logged) == sorted(payloads)


async def test_concurrent_batches_of_one_client_beyond_the_window_each_land_once() -> None:
    """Eight batches of 10 at once from one identity, on a node that remembers 16
    numbers per producer, the first batch's call slower on the wire than the others:
    the client holds a batch back while the ones in flight would span more than the
    window, so none reaches the node too old (without it the first batch's numbers
    arrive 70 below the next expected one)."""
    store = MemoryLogStore()
    async with _window_of_16(store) as client:
        send = client._stub.ProduceBatch
        calls = 0

        async def first_one_late(request: pb.ProduceBatchRequest, **kwargs: object) -> object:
            nonlocal calls
            calls += 1
            if calls == 1:
                await asyncio.sleep(0.1)
            return await send(request, **kwargs)

        client._stub.ProduceBatch = first_one_late  # type: ignore[method-assign]
        batches = [[f"{b}-{i}".encode() for i in range(10)] for b in range(8)]
        acked = await asyncio.gather(*(client.produce_batch(CHANNEL, b) for b in batches))
    assert [len(a) for a in acked] == [10] * 8
    _each_once(store, [p for b in batches for p in b])


async def _first_late(requests: AsyncIterator[object], delay: float) -> AsyncIterator[object]:
    """A stream's requests, the first held back ``delay`` on its way to the node."""
    first = True
    async for request in requests:
        if first:
            first = False
            await asyncio.sleep(delay)
        yield request


async def _one_at_a_time(stream: AppendStream, name: str, count: int) -> list[Acked]:
    return [await stream.append(f"{name}-{i}".encode()) for i in range(count)]


async def test_many_streams_of_one_client_beyond_the_window_each_land_once() -> None:
    """Eight streams of one identity appending at once on a node that remembers 16
    numbers per producer, the first stream's first frame slower on the wire than the
    rest: a streamed append is reserved as a batch of one, so the other streams wait
    for it instead of running 70 numbers ahead, and none reaches the node too old."""
    store = MemoryLogStore()
    async with _window_of_16(store) as client:
        open_call = client._stub.ProduceBatchStream
        opened = 0

        def first_one_late(requests: AsyncIterator[object], **kwargs: object) -> object:
            nonlocal opened
            opened += 1
            return open_call(_first_late(requests, 0.2) if opened == 1 else requests, **kwargs)

        client._stub.ProduceBatchStream = first_one_late  # type: ignore[method-assign]
        streams = [client.open_stream(CHANNEL) for _ in range(8)]
        try:
            acked = await asyncio.gather(
                *(_one_at_a_time(stream, str(i), 10) for i, stream in enumerate(streams))
            )
        finally:
            await asyncio.gather(*(stream.close() for stream in streams))
        assert client.producer is not None
        renewed = client.producer.producer_id != acked[0][0].producer_id
    assert [len(a) for a in acked] == [10] * 8
    assert not renewed  # nothing was refused
    _each_once(store, [f"{i}-{n}".encode() for i in range(8) for n in range(10)])
