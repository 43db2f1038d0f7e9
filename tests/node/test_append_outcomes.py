"""What a client is told about its appends, on real node processes and the real broker:
moving one channel leaves the others alone, a failed append says whether it may be in
the log (and never says "not written" of one that is), produce streams always end with
every accepted frame answered, and bad input is INVALID_ARGUMENT with a short text."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import pytest

from streamwal.errors import WriteOutcome
from streamwal.node.client import NodeClient, write_outcome
from streamwal.node.outcome import OUTCOME_KEY
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.verify.acks import Ack, Failure, digest
from streamwal.verify.cli import verify_channel
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.process import die_with_parent
from tests.etcd_keys import EtcdPrefixes
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration

_SERVICE = "/streamwal.v1.StreamingNode/"
_MOVED_CODES = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND)


@pytest.fixture(scope="module")
async def nodes(
    stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[NodeProcess, NodeProcess]]:
    """Node 1 runs the oracle, node 2 takes timestamps from it."""
    workdir: Path = tmp_path_factory.mktemp("outcomes")
    prefixes = EtcdPrefixes(stack.etcd_endpoint)
    common = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
    }
    prefix = prefixes.new("outcomes")  # the oracle's; the channels' terms live under it
    x = NodeProcess(workdir, 1, {**common, "tso": {"mode": "in-process", "key_prefix": prefix}})
    y: NodeProcess | None = None
    try:
        await x.start()
        remote = {"mode": "remote", "remote_addresses": [x.address], "key_prefix": prefix}
        y = NodeProcess(workdir, 2, {**common, "tso": remote})
        await y.start()
        yield x, y
    finally:
        if y is not None:
            await y.terminate()
        await x.terminate()
        await prefixes.delete_all()


class _Writers:
    """``count`` concurrent appenders on one produce stream per node, each moving to
    the other node when told the channel is not (or no longer) where it wrote."""

    def __init__(self, channel: str, clients: Sequence[NodeClient], count: int) -> None:
        self.channel = channel
        self.acks: list[Ack] = []
        self.failures: list[tuple[bytes, grpc.aio.AioRpcError]] = []
        self._clients = clients
        self._count = count
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> _Writers:
        streams = [c.open_stream(self.channel) for c in self._clients]
        self._streams = streams
        self._tasks = [asyncio.create_task(self._run(i)) for i in range(self._count)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        for stream in self._streams:
            await stream.close()

    async def _run(self, worker: int) -> None:
        target, seq = 0, 0
        while not self._stop.is_set():
            payload = f"{self.channel}/{worker}/{seq}".encode()
            seq += 1
            try:
                acked = await self._streams[target].append(payload)
            except grpc.aio.AioRpcError as exc:
                self.failures.append((payload, exc))
                if exc.code() in _MOVED_CODES:
                    target = 1 - target
                await asyncio.sleep(0.02)
                continue
            self.acks.append(Ack(acked.message_id, acked.time_tick, digest(payload)))

    def recorded_failures(self) -> list[Failure]:
        return [Failure(digest(p), write_outcome(e).value) for p, e in self.failures]


async def test_moving_one_channel_leaves_the_others_on_the_node_alone(
    stack: StackInfo, nodes: tuple[NodeProcess, NodeProcess], unique: str
) -> None:
    """The moved channel is written too: its fenced producer then has sends in flight,
    which a broker answers by closing the connection they came on."""
    x, y = nodes
    mover, stayer = f"outcome-mover-{unique}", f"outcome-stayer-{unique}"
    async with NodeClient(x.address) as cx, NodeClient(y.address) as cy:
        await cx.assign(mover)
        await cx.assign(stayer)
        async with (
            _Writers(stayer, [cx], count=8) as writers,
            _Writers(mover, [cx, cy], count=4),
        ):
            # to the other node and back, and taken over again by the node that has it
            for target in [cy, cx, cx, cy, cy, cx] * 3:
                await target.assign(mover)
                await asyncio.sleep(0.5)
        assert [f"{e.code().name} {e.details()}" for _, e in writers.failures] == []
        assert len(writers.acks) > 100
        report = await verify_channel(stack.pulsar_url, stayer, acks=writers.acks)
        assert report.ok, report.summary()
        assert report.acks_checked == len(writers.acks)


async def test_an_append_in_the_log_is_never_answered_not_written(
    stack: StackInfo, nodes: tuple[NodeProcess, NodeProcess], unique: str
) -> None:
    """Takeovers while 8 appends are in flight on the old owner: every failure says what
    is known, and none answered "not written" is in the log."""
    x, y = nodes
    channel = f"outcome-moved-{unique}"
    async with NodeClient(x.address) as cx, NodeClient(y.address) as cy:
        await cx.assign(channel)
        async with _Writers(channel, [cx, cy], count=8) as writers:
            for move in range(12):
                await asyncio.sleep(0.4)
                await (cy if move % 2 == 0 else cx).assign(channel)
            await asyncio.sleep(0.4)
    failures = writers.recorded_failures()
    assert failures, "the moves made no append fail: nothing was tested"
    assert all(f.outcome in ("not-written", "unknown") for f in failures)
    report = await verify_channel(stack.pulsar_url, channel, acks=writers.acks, failures=failures)
    assert report.ok, report.summary()
    assert report.failures_in_log.get("not-written", 0) == 0, report.summary()
    assert sum(report.failures.values()) == len(failures)


async def _raw_stream(
    address: str, frames: Sequence[bytes]
) -> tuple[list[pb.ProduceResponse], grpc.aio.AioRpcError | None]:
    """The answers to ``frames`` sent as they are on one ``ProduceStream``, and how the
    call ended (``None``: OK). Bounded: a call that hangs fails the test."""
    async with grpc.aio.insecure_channel(address) as raw:
        call = raw.stream_stream(
            _SERVICE + "ProduceStream", response_deserializer=pb.ProduceResponse.FromString
        )(iter(frames), timeout=10)
        answers: list[pb.ProduceResponse] = []
        try:
            async for answer in call:
                answers.append(answer)
        except grpc.aio.AioRpcError as exc:
            return answers, exc
        return answers, None


async def test_a_malformed_frame_after_an_in_band_error_ends_the_call(
    nodes: tuple[NodeProcess, NodeProcess], unique: str
) -> None:
    x, _ = nodes
    for _ in range(10):
        answers, ended = await _raw_stream(x.address, [b"\n\x04nope", b"\n\x10hg"])
        assert ended is not None and ended.code() == grpc.StatusCode.INVALID_ARGUMENT, ended
        assert len(answers) == 1
        assert answers[0].error.code == grpc.StatusCode.NOT_FOUND.value[0]
        assert answers[0].error.outcome == pb.NOT_WRITTEN


@pytest.fixture
async def assigned(nodes: tuple[NodeProcess, NodeProcess], unique: str) -> tuple[str, str]:
    """A channel assigned to node 1: its address and the channel's name."""
    address, channel = nodes[0].address, f"outcome-{unique}"
    async with NodeClient(address) as client:
        await client.assign(channel)
    return address, channel


async def test_appends_before_a_malformed_frame_are_answered_first(
    stack: StackInfo, assigned: tuple[str, str]
) -> None:
    address, channel = assigned
    payloads = [f"{channel}/{i}".encode() for i in range(5)]
    frames = [
        pb.ProduceRequest(
            pchannel=channel, message=pb.Message(type="insert", payload=p)
        ).SerializeToString()
        for p in payloads
    ]
    answers, ended = await _raw_stream(address, [*frames, b"\xff\xff\xff"])
    assert ended is not None and ended.code() == grpc.StatusCode.INVALID_ARGUMENT, ended
    assert [a.HasField("error") for a in answers] == [False] * len(payloads)
    acks = [
        Ack(a.message_id, a.time_tick, digest(p)) for a, p in zip(answers, payloads, strict=True)
    ]
    report = await verify_channel(stack.pulsar_url, channel, acks=acks)
    assert report.ok and report.acks_checked == len(payloads), report.summary()


async def test_a_long_channel_name_is_invalid_argument_with_a_short_text(
    nodes: tuple[NodeProcess, NodeProcess],
) -> None:
    x, _ = nodes
    name = "n" * 10_000
    async with NodeClient(x.address) as client:
        calls = {
            "Produce": client.produce(name, b"x"),
            "AssignChannel": client.assign(name),
            "RemoveChannel": client.remove(name),
            "GetMVCC": client.mvcc(name, "v"),
            "ProduceStream": client.produce_stream(name, [b"x"]),
        }
        for method, call in calls.items():
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert len(err.value.details() or "") < 1200, method
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in client.consume(name, timeout=10):
                pass
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_message_types_are_opaque_and_come_back_as_sent(
    assigned: tuple[str, str],
) -> None:
    # log format v2: the proto's type is the caller's string, verbatim; the WAL's own
    # records are told apart by wal_record, not by their name
    address, channel = assigned
    kinds = ["INSERT", "Insert", "insert\n", " insert", "", "time_tick", "TimeTick", "42"]
    async with NodeClient(address) as client:
        for kind in kinds:
            await client.produce(channel, kind.encode(), type=kind)
        seen = []
        async for m in client.consume(channel, timeout=30):
            seen.append(m)
            if sum(not s.wal_record for s in seen) == len(kinds):
                break
        assert seen[0].type == "TimeTick" and seen[0].wal_record
        # the owner's ticker may put its own time ticks between the appends
        assert all(m.type == "TimeTick" for m in seen if m.wal_record)
        assert [(m.type, m.payload, m.wal_record) for m in seen if not m.wal_record] == [
            (k, k.encode(), False) for k in kinds
        ]


async def test_a_failed_produce_carries_its_outcome(
    nodes: tuple[NodeProcess, NodeProcess], unique: str
) -> None:
    x, _ = nodes
    async with NodeClient(x.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.produce(f"outcome-nowhere-{unique}", b"x")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert (OUTCOME_KEY, "not-written") in tuple(err.value.trailing_metadata() or ())
    assert write_outcome(err.value) is WriteOutcome.NOT_WRITTEN


_REPO = Path(__file__).resolve().parents[2]
_STREAMING_CLIENT = """
import asyncio, sys
import grpc
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc

async def main(address: str, channel: str) -> None:
    async with grpc.aio.insecure_channel(address) as raw:
        async def frames():
            n = 0
            while True:
                n += 1
                yield pb.ProduceRequest(
                    pchannel=channel, message=pb.Message(type="insert", payload=b"k%d" % n)
                )
                await asyncio.sleep(0.005)
        answered = 0
        async for _ in pb_grpc.StreamingNodeStub(raw).ProduceStream(frames()):
            answered += 1
            if answered == 20:
                print("streaming", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_clients_killed_mid_stream_leave_no_traceback_in_the_node_log(
    assigned: tuple[str, str], nodes: tuple[NodeProcess, NodeProcess]
) -> None:
    address, channel = assigned
    for _ in range(5):
        client = await asyncio.create_subprocess_exec(
            *die_with_parent(),
            sys.executable,
            "-c",
            _STREAMING_CLIENT,
            address,
            channel,
            stdout=asyncio.subprocess.PIPE,
            cwd=_REPO,
        )
        try:
            assert client.stdout is not None
            line = await asyncio.wait_for(client.stdout.readline(), 30)
            assert line.strip() == b"streaming"
        finally:
            client.kill()
            await client.wait()
    await asyncio.sleep(2)  # the node notices the streams went
    log = nodes[0].log_text()
    assert "Failed to detach context" not in log
