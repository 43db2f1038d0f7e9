"""Hostile gRPC input to a node process: every answer is a typed status code, and the
node goes on serving. (The basic bad requests are in ``test_node_e2e.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.node.client import NodeClient, policy
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import verify_channel
from streamwal_lab.stack import StackInfo
from tests.etcd_keys import EtcdPrefixes
from tests.node.processes import NodeProcess, running
from tests.node.rpc_codes import code_of

pytestmark = pytest.mark.integration

_SERVICE = "/streamwal.v1.StreamingNode/"


@pytest.fixture(scope="module")
async def node(stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    workdir: Path = tmp_path_factory.mktemp("hostile")
    prefixes = EtcdPrefixes(stack.etcd_endpoint)
    process = NodeProcess(
        workdir,
        1,
        {
            "pulsar": {"service_url": stack.pulsar_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"mode": "in-process", "key_prefix": prefixes.new("hostile")},
            # gRPC's limits derive from it: 16 MiB keeps a 20 MiB request over them
            "wal": {"max_message_bytes": 16 * 1024 * 1024},
        },
    )
    try:
        async with running(process):
            yield process.address
    finally:
        await prefixes.delete_all()


@pytest.fixture
async def client(node: str) -> AsyncIterator[NodeClient]:
    async with NodeClient(node, timeout=30) as c:
        yield c


@pytest.fixture
async def channel(client: NodeClient, unique: str) -> str:
    """A fresh channel, assigned on the node (the suite's ``channel`` would delete its
    topic under the module's node, which still holds it)."""
    channel = f"hostile-{unique}"
    await client.assign(channel)
    return channel


async def _still_serves(address: str, client: NodeClient, channel: str) -> None:
    async with grpc.aio.insecure_channel(address) as raw:
        health = health_pb2_grpc.HealthStub(raw)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert (await client.produce(channel, b"still serving")).time_tick > 0


async def test_malformed_request_bytes_get_invalid_argument(
    node: str, client: NodeClient, channel: str
) -> None:
    async with grpc.aio.insecure_channel(node) as raw:
        for method in ("Produce", "AssignChannel", "RemoveChannel", "GetMVCC", "ListChannels"):
            call = raw.unary_unary(_SERVICE + method)
            for body in (b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x12\xff"):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call(body, timeout=10)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, body)
        consume = raw.unary_stream(_SERVICE + "Consume")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in consume(b"\xff\xff", timeout=10):
                pass
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        unknown = raw.unary_unary(_SERVICE + "NoSuchMethod")
        assert await code_of(unknown(b"", timeout=10)) == grpc.StatusCode.UNIMPLEMENTED
    await _still_serves(node, client, channel)


async def test_a_malformed_request_in_the_middle_of_a_stream_ends_it_with_invalid_argument(
    node: str, client: NodeClient, channel: str
) -> None:
    good = pb.ProduceRequest(pchannel=channel, message=pb.Message(type="insert", payload=b"ok"))

    ended = asyncio.Event()

    async def requests() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield good.SerializeToString()
        yield b"\xff\xff\xff"
        # A write racing the server's abort can reach grpcio's asyncio client as
        # INTERNAL (grpc/grpc#36066); the point here is that the good request after
        # the bad one is never appended, so it is offered once the call has ended.
        await ended.wait()
        yield good.SerializeToString()

    async with grpc.aio.insecure_channel(node) as raw:
        stream = raw.stream_stream(_SERVICE + "ProduceStream")
        answered = 0
        with pytest.raises(grpc.aio.AioRpcError) as err:
            try:
                async for _ in stream(requests(), timeout=30):
                    answered += 1
            finally:
                ended.set()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert answered <= 3
    await _still_serves(node, client, channel)


async def test_every_rpc_on_an_unknown_channel_is_not_found(
    node: str, client: NodeClient, unique: str
) -> None:
    nowhere = f"hostile-nowhere-{unique}"
    assert await code_of(client.produce(nowhere, b"x")) == grpc.StatusCode.NOT_FOUND
    assert await code_of(client.mvcc(nowhere, "v")) == grpc.StatusCode.NOT_FOUND
    assert await code_of(client.remove(nowhere)) == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in client.consume(nowhere, limit=1):
            pass
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.produce_stream(nowhere, [b"a", b"b"])
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "append 1 of 2" in (err.value.details() or "")
    for bad in ("", "x" * 201, "a/b", "-leading-dash", "ünïcode", "with space"):
        assert await code_of(client.assign(bad)) == grpc.StatusCode.INVALID_ARGUMENT, bad
    await client.assign(nowhere)
    await _still_serves(node, client, nowhere)


async def test_a_failed_streamed_append_is_answered_in_band_and_the_stream_goes_on(
    node: str, client: NodeClient, channel: str, unique: str
) -> None:
    def request(pchannel: str, payload: bytes) -> pb.ProduceRequest:
        return pb.ProduceRequest(
            pchannel=pchannel, message=pb.Message(type="insert", payload=payload)
        )

    async def requests() -> AsyncIterator[pb.ProduceRequest]:
        yield request(channel, b"first")
        yield request(f"hostile-absent-{unique}", b"lost")
        yield pb.ProduceRequest(  # a producer id without its sequence number
            pchannel=channel, message=pb.Message(type="insert", payload=b"x"), producer_id=7
        )
        yield request(channel, b"last")

    async with grpc.aio.insecure_channel(node) as raw:
        replies = [r async for r in pb_grpc.StreamingNodeStub(raw).ProduceStream(requests())]
    assert [r.HasField("error") for r in replies] == [False, True, True, False]
    assert replies[1].error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert replies[2].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "sequence" in replies[2].error.message
    assert 0 < replies[0].time_tick < replies[3].time_tick
    await _still_serves(node, client, channel)
    inserted: list[bytes] = []
    async for m in client.consume(channel, policy("all"), timeout=10):
        if m.type.lower() == "insert":
            inserted.append(m.payload)
        if m.payload == b"still serving":
            break
    assert inserted == [b"first", b"last", b"still serving"]


async def test_oversized_input_is_refused_with_a_typed_code(
    node: str, client: NodeClient, channel: str
) -> None:
    # properties the broker cannot take in one message
    many = {f"k{i}": "x" * 600 for i in range(10_000)}
    assert await code_of(client.produce(channel, b"x", properties=many)) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    # over the gRPC message limit, inside a stream
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.produce_stream(channel, [b"small", b"y" * (20 * 1024 * 1024)])
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await _still_serves(node, client, channel)


async def test_invalid_delivery_policies_get_invalid_argument(
    node: str, client: NodeClient, unique: str
) -> None:
    channel = f"hostile-policy-{unique}"
    opened = await client.assign(channel)
    other = f"hostile-policy-other-{unique}"
    await client.assign(other)
    elsewhere = await client.produce(other, b"in another channel")
    next_entry = PulsarMessageId.from_bytes(opened.first_message_id)
    beyond = PulsarMessageId(next_entry.ledger, next_entry.entry + 1000).to_bytes()

    async def consume_with(delivery: pb.DeliveryPolicy) -> grpc.StatusCode | None:
        try:
            async for _ in client.consume(channel, delivery, limit=1, timeout=20):
                pass
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return None

    for kind, message_id in (
        ("start_after", b""),
        ("start_from", b"\x00" * 19),
        ("start_after", b"\xff" * 21),
        ("start_from", beyond),
        ("start_after", elsewhere.message_id),  # an id of another channel
    ):
        got = await consume_with(policy(kind, message_id=message_id))
        assert got == grpc.StatusCode.INVALID_ARGUMENT, (kind, message_id.hex())
    # no policy at all reads everything: the first message is the first time tick
    first = [m async for m in client.consume(channel, pb.DeliveryPolicy(), limit=1)]
    assert first[0].message_id == opened.first_message_id and first[0].type == "TimeTick"
    await _still_serves(node, client, channel)


async def test_clients_that_go_away_mid_stream_leave_the_node_serving_and_the_log_whole(
    node: str, client: NodeClient, stack: StackInfo, channel: str
) -> None:
    acks: list[Ack] = []
    for round_ in range(5):
        async with grpc.aio.insecure_channel(node) as raw:
            stub = pb_grpc.StreamingNodeStub(raw)
            payloads = [f"{channel}/{round_}/{i}".encode() for i in range(10_000)]

            async def requests(
                payloads: list[bytes] = payloads,
            ) -> AsyncIterator[pb.ProduceRequest]:
                for payload in payloads:
                    yield pb.ProduceRequest(
                        pchannel=channel, message=pb.Message(type="insert", payload=payload)
                    )
                    await asyncio.sleep(0)

            call = stub.ProduceStream(requests(), timeout=60)
            answered = 0
            async for reply in call:
                acks.append(Ack(reply.message_id, reply.time_tick, digest(payloads[answered])))
                answered += 1
                if answered == 50:
                    break  # the client goes away with appends in flight
            call.cancel()
        # and readers that vanish after one message
        readers = [client.consume(channel, policy("all")) for _ in range(10)]
        for reader in readers:
            await anext(reader)
        for reader in readers:
            with contextlib.suppress(Exception):
                await reader.aclose()
    await _still_serves(node, client, channel)
    report = await verify_channel(stack.pulsar_url, channel, acks=acks)
    assert report.ok, report.summary()
    assert report.acks_checked == 250
