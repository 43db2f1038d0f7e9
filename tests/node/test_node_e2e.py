"""The node end to end through gRPC, as processes on the real stack."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.node.client import Consumed, NodeClient, grpc_code_of, policy
from streamwal.server.runtime import SERVICE_NAME
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import verify_channel
from streamwal.verify.history import HistoryReport
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, running
from tests.node.rpc_codes import code_of

pytestmark = pytest.mark.integration


def _oracle(stack: StackInfo, workdir: Path, key_prefix: str) -> NodeProcess:
    """Node 1: the TSO in-process."""
    return NodeProcess(
        workdir,
        1,
        {
            "pulsar": {"service_url": stack.pulsar_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"mode": "in-process", "key_prefix": key_prefix},
            # below the 6 MiB append of the bad-request test, which would otherwise be
            # chunked and written; its gRPC limit (1 MiB more) still lets it through
            "wal": {"max_message_bytes": 11 * 512 * 1024},
        },
    )


@contextlib.asynccontextmanager
async def _with_node_two(
    stack: StackInfo, workdir: Path, oracle: NodeProcess
) -> AsyncIterator[tuple[NodeProcess, NodeProcess]]:
    """Node 2 running, its timestamps from node 1: ``(node 1, node 2)``."""
    two = NodeProcess(
        workdir,
        2,
        {
            "pulsar": {"service_url": stack.pulsar_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            # the oracle's prefix: the channels' terms live under it
            "tso": {
                "mode": "remote",
                "remote_addresses": [oracle.address],
                "key_prefix": oracle.config["tso"]["key_prefix"],
            },
        },
    )
    async with running(two):
        yield oracle, two


@pytest.fixture(scope="module")
async def oracle(
    stack: StackInfo, module_workdir: Path, module_etcd_prefix: Callable[[str], str]
) -> AsyncIterator[NodeProcess]:
    """Node 1, shared by the module's tests: each writes channels of its own and none
    stops it, so starting it once per test would only cost time."""
    async with running(_oracle(stack, module_workdir, module_etcd_prefix("e2e"))) as one:
        yield one


@pytest.fixture(scope="module")
async def two_nodes(
    stack: StackInfo, oracle: NodeProcess, module_workdir: Path
) -> AsyncIterator[tuple[NodeProcess, NodeProcess]]:
    """Nodes 1 and 2 for the tests that leave both running."""
    async with _with_node_two(stack, module_workdir, oracle) as nodes:
        yield nodes


@pytest.fixture
async def client(two_nodes: tuple[NodeProcess, NodeProcess]) -> AsyncIterator[NodeClient]:
    """A client of node 1, where the tests that leave both nodes running write."""
    one, _ = two_nodes
    async with NodeClient(one.address) as connected:
        yield connected


async def _through(
    client: NodeClient, channel: str, last: bytes, *, timeout: float | None = 30
) -> list[Consumed]:
    """Everything ``channel`` holds from its start through the message ``last``."""
    got: list[Consumed] = []
    async for m in client.consume(channel, policy("all"), timeout=timeout):
        got.append(m)
        if m.message_id == last:
            break
    return got


async def _verified(
    stack: StackInfo, channel: str, acks: list[Ack], tmp_path: Path
) -> HistoryReport:
    """``channel`` checked against ``acks``, handed over as the acks file an operator
    would write."""
    acks_file = tmp_path / "acks.jsonl"
    acks_file.write_text("".join(a.to_json() + "\n" for a in acks))
    return await verify_channel(stack.pulsar_url, channel, acks_file)


@pytest.fixture
async def node_two_to_stop(
    stack: StackInfo, oracle: NodeProcess, tmp_path: Path
) -> AsyncIterator[tuple[NodeProcess, NodeProcess]]:
    """Node 1 and a node 2 of the test's own, which the test stops."""
    async with _with_node_two(stack, tmp_path, oracle) as nodes:
        yield nodes


async def test_produce_consume_round_trip(client: NodeClient, unique: str) -> None:
    channel = f"e2e-rt-{unique}"
    opened = await client.assign(channel)
    acked = [
        await client.produce(channel, f"m-{i}".encode(), vchannel=f"v{i % 2}") for i in range(20)
    ]
    acked += await client.produce_stream(channel, [f"s-{i}".encode() for i in range(50)])
    ticks = [a.time_tick for a in acked]
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
    assert ticks[0] > opened.first_time_tick
    got = await _through(client, channel, acked[-1].message_id, timeout=None)
    assert got[0].type == "TimeTick" and got[0].time_tick == opened.first_time_tick
    # periodic time ticks may sit between the data; the data is all there, in order
    assert [m.payload for m in got if m.type != "TimeTick"] == [
        f"m-{i}".encode() for i in range(20)
    ] + [f"s-{i}".encode() for i in range(50)]
    assert [m.time_tick for m in got] == sorted(m.time_tick for m in got)
    only_v1 = []
    async for m in client.consume(channel, policy("all"), vchannel="v1"):
        assert m.vchannel in ("v1", "")  # its own and the broadcast ones
        if m.type != "TimeTick" and m.vchannel == "v1":
            only_v1.append(m.payload)
        if len(only_v1) == 10:
            break
    assert only_v1 == [f"m-{i}".encode() for i in range(1, 20, 2)]
    after = []
    async for m in client.consume(channel, policy("start_after", message_id=acked[9].message_id)):
        if m.type != "TimeTick":
            after.append(m.payload)
        if len(after) == 3:
            break
    assert after == [b"m-10", b"m-11", b"m-12"]
    state = await client.mvcc(channel, "v1")
    assert state.time_tick >= acked[19].time_tick


async def test_milvus_messages_pass_verbatim_and_wal_records_are_marked(
    client: NodeClient, unique: str
) -> None:
    """Log format v2 through a node: a caller's type (Milvus's "TimeTick" included) and
    properties ("_" keys, empty values) come back as sent, wal_record tells the WAL's
    own records apart, and appended_only leaves them out."""
    channel = f"e2e-verbatim-{unique}"
    milvus = {"_t": "1", "_v": "2", "_tt": "449", "_vc": "by-dev-rootcoord-dml_0", "_h": ""}
    kinds = ["TimeTick", "Insert", "CreateCollection", "", "36"]
    opened = await client.assign(channel)
    acked = [await client.produce(channel, k.encode(), type=k, properties=milvus) for k in kinds]
    everything = await _through(client, channel, acked[-1].message_id)
    assert everything[0].wal_record and everything[0].type == "TimeTick"
    mine = [m for m in everything if not m.wal_record]
    assert [(m.type, m.payload, m.properties) for m in mine] == [
        (k, k.encode(), milvus) for k in kinds
    ]
    assert [m.message_id for m in mine] == [a.message_id for a in acked]
    assert {m.term for m in everything} == {opened.term} != {0}  # the owner's term
    appended = [
        m
        async for m in client.consume(
            channel, policy("all"), appended_only=True, limit=len(kinds), timeout=30
        )
    ]
    assert [m.message_id for m in appended] == [a.message_id for a in acked]
    async for first in client.consume_batches(
        channel, policy("all"), appended_only=True, timeout=30
    ):
        assert first and not any(m.wal_record for m in first)
        break


async def _data(client: NodeClient, channel: str, delivery: object, count: int) -> list[Consumed]:
    """The first ``count`` non-time-tick messages a read with ``delivery`` yields."""
    got: list[Consumed] = []
    async for m in client.consume(channel, delivery, timeout=30):  # type: ignore[arg-type]
        if m.type != "TimeTick":
            got.append(m)
        if len(got) == count:
            break
    return got


async def test_an_append_stream_answers_each_append_in_order_and_outlives_a_failure(
    client: NodeClient, unique: str
) -> None:
    channel = f"e2e-as-{unique}"
    async with client.open_stream(channel) as stream:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stream.append(b"before the assign")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()
        await client.assign(channel)
        payloads = [f"p-{i}".encode() for i in range(50)]
        acked = await asyncio.gather(*(stream.append(p) for p in payloads))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stream.append(b"after close")
    assert err.value.code() == grpc.StatusCode.CANCELLED
    ticks = [a.time_tick for a in acked]
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
    logged = {
        m.message_id: m.payload for m in await _through(client, channel, acked[-1].message_id)
    }
    # every append got the acknowledgement of its own message, not a neighbour's
    assert [logged[a.message_id] for a in acked] == payloads
    assert [p for p in logged.values() if p.startswith(b"p-")] == payloads


async def test_consume_from_a_message_or_a_time_tick(client: NodeClient, unique: str) -> None:
    channel = f"e2e-from-{unique}"
    await client.assign(channel)
    acked = [await client.produce(channel, f"m-{i}".encode()) for i in range(10)]
    # start_from is inclusive: the named message comes first
    got = await _data(client, channel, policy("start_from", message_id=acked[5].message_id), 3)
    assert [m.message_id for m in got] == [a.message_id for a in acked[5:8]]
    assert [m.payload for m in got] == [b"m-5", b"m-6", b"m-7"]
    # start_from_time_tick: everything with a time tick >= the one given
    exact = acked[5].time_tick
    got = await _data(client, channel, policy("start_from_time_tick", time_tick=exact), 3)
    assert [m.payload for m in got] == [b"m-5", b"m-6", b"m-7"]
    assert all(m.time_tick >= exact for m in got)
    later = policy("start_from_time_tick", time_tick=exact + 1)
    assert [m.payload for m in await _data(client, channel, later, 2)] == [b"m-6", b"m-7"]
    past_all = policy("start_from_time_tick", time_tick=acked[-1].time_tick + 1)
    tail = asyncio.create_task(_data(client, channel, past_all, 1))
    await asyncio.sleep(0.5)
    assert not tail.done()  # nothing old qualifies; it waits for new messages
    await client.produce(channel, b"next")
    assert [m.payload for m in await asyncio.wait_for(tail, 30)] == [b"next"]


async def test_consume_latest_sees_only_new_messages(client: NodeClient, unique: str) -> None:
    channel = f"e2e-latest-{unique}"
    await client.assign(channel)
    for i in range(5):
        await client.produce(channel, f"old-{i}".encode())
    got: list[bytes] = []
    first = asyncio.Event()

    async def read() -> None:
        async for m in client.consume(channel, policy("latest"), timeout=30):
            if m.type == "TimeTick":
                continue
            got.append(m.payload)
            first.set()
            if m.payload == b"tail-2":
                return

    reader = asyncio.create_task(read())
    # when the node starts the read is not visible to the client: write until the
    # reader sees something, then a known tail
    sent: list[bytes] = []
    while not first.is_set():
        assert len(sent) < 100, "the latest reader saw nothing"
        sent.append(f"new-{len(sent)}".encode())
        await client.produce(channel, sent[-1])
        await asyncio.sleep(0.05)
    for i in range(3):
        sent.append(f"tail-{i}".encode())
        await client.produce(channel, sent[-1])
    await asyncio.wait_for(reader, 30)
    assert not any(p.startswith(b"old-") for p in got), got
    # a gap-free run of what was written after the read began, through the tail
    assert got == sent[len(sent) - len(got) :], got


async def test_move_a_channel_while_producing_loses_nothing(
    two_nodes: tuple[NodeProcess, NodeProcess], unique: str, stack: StackInfo, tmp_path: Path
) -> None:
    one, two = two_nodes
    channel = f"e2e-move-{unique}"
    acks: list[Ack] = []
    async with NodeClient(one.address) as c1, NodeClient(two.address) as c2:
        await c1.assign(channel)
        moved = asyncio.Event()
        codes: list[grpc.StatusCode | None] = []
        refusals: list[str] = []

        async def producer() -> None:
            target, seq = c1, 0
            while seq < 400:
                payload = f"p-{seq}".encode()
                try:
                    a = await target.produce(channel, payload)
                except grpc.aio.AioRpcError as exc:
                    codes.append(grpc_code_of(exc))
                    refusals.append(exc.details() or "")
                    await moved.wait()
                    target = c2
                    continue
                acks.append(Ack(a.message_id, a.time_tick, digest(payload)))
                seq += 1

        task = asyncio.create_task(producer())
        while len(acks) < 100:
            await asyncio.sleep(0.01)
        await c2.assign(channel)
        moved.set()
        await asyncio.wait_for(task, 60)
        # the producer's first refusal is the fence itself, and says so; it switched
        # to node 2 at once, so node 1 never had to answer NOT_FOUND
        assert codes == [grpc.StatusCode.FAILED_PRECONDITION], refusals
        assert f"channel {channel!r} is fenced by another owner: " in refusals[0], refusals
        # node 1 closed the channel: its next listing reports it fenced since the last
        # one, once, and lists it as fenced (not owned) until it is removed there
        listing = await c1.list_channels()
        assert channel in listing.fenced
        assert [c.fenced for c in listing.channels if c.pchannel == channel] == [True]
        assert channel not in (await c1.list_channels()).fenced
        for _ in range(2):  # fenced is said every time, not once and then NOT_FOUND
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await c1.produce(channel, b"late")
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        await c1.remove(channel)
        assert channel not in [c.pchannel for c in (await c1.list_channels()).channels]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c1.produce(channel, b"later")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()
    report = await _verified(stack, channel, acks, tmp_path)
    assert report.ok, report.summary()
    assert report.acks_checked == 400
    assert [node for node, _ in report.owners] == [1, 2]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stop_signal_during_traffic_loses_no_acknowledged_message(
    node_two_to_stop: tuple[NodeProcess, NodeProcess],
    unique: str,
    stack: StackInfo,
    tmp_path: Path,
    sig: signal.Signals,
) -> None:
    _, two = node_two_to_stop
    channel = f"e2e-{sig.name.lower()}-{unique}"
    acks: list[Ack] = []
    async with NodeClient(two.address) as client:
        await client.assign(channel)

        async def produce(worker: int) -> None:
            seq = 0
            while True:
                payload = f"w{worker}-{seq}".encode()
                try:
                    a = await client.produce(channel, payload)
                except grpc.aio.AioRpcError:
                    return
                acks.append(Ack(a.message_id, a.time_tick, digest(payload)))
                seq += 1

        workers = [asyncio.create_task(produce(w)) for w in range(8)]
        while len(acks) < 200:
            await asyncio.sleep(0.01)
        assert await two.stop(sig) == 0
        for w in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(w, 30)
    report = await _verified(stack, channel, acks, tmp_path)
    assert report.ok, report.summary()
    assert report.acks_checked == len(acks) >= 200


async def test_bad_requests_get_typed_codes_and_the_node_keeps_serving(
    client: NodeClient, unique: str
) -> None:
    channel = f"e2e-bad-{unique}"

    assert await code_of(client.produce(f"nowhere-{unique}", b"x")) == grpc.StatusCode.NOT_FOUND
    assert await code_of(client.assign("bad name!")) == grpc.StatusCode.INVALID_ARGUMENT
    await client.assign(channel)
    # a caller's type is opaque and its properties verbatim (log format v2): what
    # was refused before (an unknown type, "TimeTick", "_" keys) is carried
    for kind, props in (("no-such-type", {}), ("TimeTick", {}), ("", {"_tt": "1", "": ""})):
        assert await code_of(client.produce(channel, b"x", type=kind, properties=props)) is None
    many = {f"k{i}": "x" * 600 for i in range(2_000)}  # over the property map's limit
    assert await code_of(client.produce(channel, b"x", properties=many)) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    huge = client.produce(channel, b"x" * (6 * 1024 * 1024))
    assert await code_of(huge) == grpc.StatusCode.INVALID_ARGUMENT
    too_huge = client.produce(channel, b"x" * (20 * 1024 * 1024))
    assert await code_of(too_huge) == grpc.StatusCode.RESOURCE_EXHAUSTED

    async def consume_with(delivery: object) -> grpc.StatusCode | None:
        try:
            async for _ in client.consume(channel, delivery, limit=1):  # type: ignore[arg-type]
                pass
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return None

    assert await consume_with(policy("start_from", message_id=b"garbage")) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    unknown = PulsarMessageId(999_999_999, 1).to_bytes()
    assert await consume_with(policy("start_from", message_id=unknown)) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    # a client that goes away in the middle of a stream
    stream = client.consume(channel, policy("all"))
    await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]  # an async generator
    # the node still serves
    ack = await client.produce(channel, b"still-serving")
    assert ack.time_tick > 0


async def test_health_turns_not_serving_before_the_node_stops(
    node_two_to_stop: tuple[NodeProcess, NodeProcess],
) -> None:
    """A watcher hears NOT_SERVING from the node itself (so before its server stops),
    then its stream ends, and the watcher does not hold the stop for the grace period."""
    _, two = node_two_to_stop
    request = health_pb2.HealthCheckRequest(service=SERVICE_NAME)
    async with grpc.aio.insecure_channel(two.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        assert (await stub.Check(request)).status == health_pb2.HealthCheckResponse.SERVING
        watch = stub.Watch(request)
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        started = time.monotonic()
        stopping = asyncio.create_task(two.terminate())
        update = await asyncio.wait_for(watch.read(), 10)
        assert update.status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert await asyncio.wait_for(watch.read(), 10) is grpc.aio.EOF
        assert await watch.code() == grpc.StatusCode.OK
        assert await stopping == 0
    assert time.monotonic() - started < 5  # the default grace is 10 s
