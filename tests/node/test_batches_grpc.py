"""Batched produce and consume through a real node on the real stack."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from streamwal.errors import WriteOutcome
from streamwal.node.client import (
    Acked,
    BatchProduceError,
    Consumed,
    NodeClient,
    policy,
    write_outcome,
)
from streamwal.node.client.answers import batch_acks
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, running

pytestmark = pytest.mark.integration

MAX_MESSAGE = 2048


@pytest.fixture(scope="module")
async def node(
    stack: StackInfo, module_workdir: Path, module_etcd_prefix: Callable[[str], str]
) -> AsyncIterator[NodeProcess]:
    """One node for the module: each test writes a channel of its own."""
    settings = {
        "pulsar": {"service_url": stack.pulsar_url, "max_message_size": MAX_MESSAGE},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "tso": {"mode": "in-process", "key_prefix": module_etcd_prefix("batch")},
    }
    async with running(NodeProcess(module_workdir, 1, settings)) as process:
        yield process


async def _read_data(client: NodeClient, channel: str, count: int) -> list[list[Consumed]]:
    """Frames of ``ConsumeBatch`` from the start until ``count`` data messages came."""
    frames: list[list[Consumed]] = []
    seen = 0
    async for frame in client.consume_batches(channel, policy("all"), max_messages=100):
        frames.append(frame)
        seen += sum(1 for m in frame if m.type != "TimeTick")
        if seen >= count:
            return frames
    raise AssertionError("the stream ended")


async def test_batches_land_in_order_and_are_read_back_in_frames(
    node: NodeProcess, channel: str
) -> None:
    async with NodeClient(node.address) as client:
        await client.assign(channel)
        first = await client.produce_batch(channel, [b"a%03d" % i for i in range(300)])
        streamed = await client.produce_batches(
            channel, [[b"s%d-%02d" % (b, i) for i in range(40)] for b in range(10)]
        )
        acked: list[Acked] = first + [a for batch in streamed for a in batch]
        ticks = [a.time_tick for a in acked]
        assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)

        frames = await _read_data(client, channel, len(acked))
        data = [m for frame in frames for m in frame if m.type != "TimeTick"]
        expected = [b"a%03d" % i for i in range(300)]
        expected += [b"s%d-%02d" % (b, i) for b in range(10) for i in range(40)]
        assert [m.payload for m in data] == expected  # back to back, in batch order
        assert [(m.message_id, m.time_tick) for m in data] == [
            (a.message_id, a.time_tick) for a in acked
        ]
        assert max(len(f) for f in frames) == 100  # many per frame, within the bound
        assert len(frames) < len(data) / 10
        # the same log through the single-message Consume
        single = []
        async for m in client.consume(channel, policy("all")):
            if m.type != "TimeTick":
                single.append(m)
            if len(single) == len(data):
                break
        assert single == data


async def test_the_compact_and_the_per_message_answers_give_the_log_s_ids_and_ticks(
    node: NodeProcess, channel: str
) -> None:
    """On Pulsar, with packs: batches asked in runs and batches asked per message,
    interleaved, each expanded by the client to the ids, texts and ticks a reader
    gets back from the log; a run stands for many messages."""
    async with NodeClient(node.address) as client, grpc.aio.insecure_channel(node.address) as raw:
        await client.assign(channel)
        stub = pb_grpc.StreamingNodeStub(raw)
        answers: list[Acked] = []
        runs = 0
        for batch, compact in enumerate((True, False, True, False)):
            request = pb.ProduceBatchRequest(pchannel=channel, compact=compact)
            request.messages.extend(
                [pb.Message(type="insert", payload=b"%d-%03d" % (batch, i)) for i in range(150)]
            )
            reply = await stub.ProduceBatch(request)
            expected = (0, True) if compact else (150, False)
            assert (len(reply.results), bool(reply.runs)) == expected
            runs += len(reply.runs)
            answers += batch_acks(reply, "the batch", [None] * 150)
        assert runs < 300 / 10  # 300 messages in runs: far fewer runs than messages
        frames = await _read_data(client, channel, len(answers))
        data = [m for frame in frames for m in frame if m.type != "TimeTick"]
        assert [(m.message_id, m.message_id_text, m.time_tick) for m in data] == [
            (a.message_id, a.message_id_text, a.time_tick) for a in answers
        ]


async def test_a_partial_batch_names_what_landed_and_invalid_input_writes_nothing(
    node: NodeProcess, channel: str
) -> None:
    async with NodeClient(node.address) as client:
        await client.assign(channel)
        payloads = [b"p0", b"p1", b"x" * (MAX_MESSAGE + 1), b"p3"]
        with pytest.raises(BatchProduceError) as caught:
            await client.produce_batch(channel, payloads)
        assert list(caught.value.failed) == [2]
        error = caught.value.failed[2]
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert write_outcome(error) is WriteOutcome.NOT_WRITTEN
        landed = [r for r in caught.value.results if isinstance(r, Acked)]
        assert len(landed) == 3

        # (any type is a caller's now): message 1's sequence number would pass 2**64 - 1
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.produce_batch(channel, [b"q0", b"q1"], numbers=(7, 2**64 - 1))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "message 1 of the batch" in (refused.value.details() or "")
        assert write_outcome(refused.value) is WriteOutcome.NOT_WRITTEN

        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await client.produce_batch(f"{channel}-not-here", [b"r"])
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND

        # on a stream, a refused batch is answered in band and the stream goes on
        with pytest.raises(BatchProduceError) as streamed:
            await client.produce_batches(channel, [[b"t0"], [b"t1", b"x" * (MAX_MESSAGE + 1)]])
        assert list(streamed.value.failed) == [1]

        frames = await _read_data(client, channel, 5)
        data = [m.payload for frame in frames for m in frame if m.type != "TimeTick"]
        assert data == [b"p0", b"p1", b"p3", b"t0", b"t1"]


async def test_frames_carry_every_field_as_produced(node: NodeProcess, channel: str) -> None:
    """Properties (none, several), vchannels, idempotent and transactional appends and
    payloads larger than a frame's byte bound, read back in frames and one by one."""
    async with NodeClient(node.address) as client:
        await client.assign(channel)
        sent: list[tuple[Acked, bytes, str, dict[str, str]]] = []
        for i in range(60):
            payload = b"%d" % i * (1500 // len(b"%d" % i) if i % 7 == 0 else 1)
            vchannel = ("", "va", "vb")[i % 3]
            properties = {} if i % 2 else {"i": str(i), "empty": "", "ü": "✓"}
            acked = await client.produce(channel, payload, vchannel=vchannel, properties=properties)
            sent.append((acked, payload, vchannel, properties))
        txn = await client.begin_txn(channel, "va")
        inside = await client.produce(channel, b"in-txn", vchannel="va", txn_id=txn)
        await client.commit_txn(channel, txn)

        frames: list[list[Consumed]] = []
        async for frame in client.consume_batches(channel, policy("all"), max_bytes=1000):
            frames.append(frame)
            if any(m.payload == b"in-txn" for m in frame):
                break
        read = [m for frame in frames for m in frame]
        data = [m for m in read if m.type == "insert"]
        assert [
            (
                m.message_id,
                m.time_tick,
                m.payload,
                m.vchannel,
                m.properties,
                m.producer_id,
                m.sequence,
            )
            for m in data[:60]
        ] == [
            (a.message_id, a.time_tick, p, v, props, a.producer_id, a.sequence)
            for a, p, v, props in sent
        ]
        assert all(m.txn_id is None for m in data[:60])
        (in_txn,) = [m for m in data if m.payload == b"in-txn"]
        assert (in_txn.message_id, in_txn.txn_id) == (inside.message_id, txn)
        assert any(len(frame) > 1 for frame in frames)
        for frame in frames:  # a payload over the bound goes alone
            assert len(frame) == 1 or all(len(m.payload) < 1000 for m in frame)
        single = []
        async for m in client.consume(channel, policy("all")):
            single.append(m)
            if len(single) == len(read):
                break
        assert single == read
