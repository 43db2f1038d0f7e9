"""Read-only reads through nodes that do not own the channel, as processes on the stack.

Node A owns a channel and writes; node B, which never owns it, serves read-only reads
with every policy, ids equal to A's own readers'; while B reads, the channel moves to
node C, and B's reader goes on into C's messages. B fences nobody and leaves no
subscription on the topic (asked of Pulsar's admin API).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.node.client import Acked, Consumed, NodeClient, policy
from streamwal.node.proto import streaming_pb2 as pb
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, streamwal_cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def nodes(
    stack: StackInfo, module_workdir: Path, module_etcd_prefix: Callable[[str], str]
) -> AsyncIterator[tuple[NodeProcess, NodeProcess, NodeProcess]]:
    """Nodes A (the TSO in-process), B and C (timestamps from A), shared by the module."""
    broker = {"service_url": stack.pulsar_url}
    etcd = {"endpoints": [stack.etcd_endpoint]}
    a = NodeProcess(
        module_workdir,
        1,
        {
            "pulsar": broker,
            "etcd": etcd,
            "tso": {"mode": "in-process", "key_prefix": module_etcd_prefix("ro")},
        },
    )
    started: list[NodeProcess] = []
    try:
        await a.start()
        started.append(a)
        others = [
            NodeProcess(
                module_workdir,
                node_id,
                {
                    "pulsar": broker,
                    "etcd": etcd,
                    "tso": {
                        "mode": "remote",
                        "remote_addresses": [a.address],
                        "key_prefix": a.config["tso"]["key_prefix"],
                    },
                },
            )
            for node_id in (2, 3)
        ]
        await asyncio.gather(*(n.start() for n in others))
        started += others
        yield a, others[0], others[1]
    finally:
        await asyncio.gather(*(n.terminate() for n in started), return_exceptions=True)


def _admin(stack: StackInfo) -> PulsarAdmin:
    return PulsarAdmin(stack.pulsar_admin_url)


def _topic_path(stack: StackInfo, channel: str) -> str:
    return PulsarAdmin.topic_path(PulsarConfig(service_url=stack.pulsar_url).topic(channel))


async def _subscriptions(stack: StackInfo, channel: str) -> dict[str, Any]:
    """The topic's subscriptions by name, each with the broker's stats (``isDurable``)."""
    stats = await _admin(stack).get(f"{_topic_path(stack, channel)}/stats")
    assert isinstance(stats, dict)
    return dict(stats.get("subscriptions", {}))


async def _durable(stack: StackInfo, channel: str) -> set[str]:
    subs = await _subscriptions(stack, channel)
    return {name for name, s in subs.items() if s.get("isDurable", True)}


async def _read(
    client: NodeClient, channel: str, wire: pb.DeliveryPolicy, count: int, *, read_only: bool
) -> list[Consumed]:
    got = client.consume(channel, wire, limit=count, timeout=30, read_only=read_only)
    return [m async for m in got]


async def _data(
    client: NodeClient, channel: str, wire: pb.DeliveryPolicy, count: int
) -> list[Consumed]:
    """The first ``count`` messages a caller appended, read read-only (time ticks the
    WAL writes, periodic ones included, left out)."""
    out: list[Consumed] = []
    stream = client.consume(channel, wire, timeout=30, read_only=True)
    async with contextlib.aclosing(stream):
        async for m in stream:
            if m.type != "TimeTick":
                out.append(m)
            if len(out) == count:
                break
    return out


def _ids(messages: list[Consumed]) -> list[bytes]:
    return [m.message_id for m in messages]


async def test_a_node_that_does_not_own_the_channel_reads_it_with_every_policy(
    nodes: tuple[NodeProcess, NodeProcess, NodeProcess], stack: StackInfo, unique: str
) -> None:
    a, b, _ = nodes
    channel = f"ro-policies-{unique}"
    async with NodeClient(a.address) as owner, NodeClient(b.address) as reader:
        await owner.assign(channel)
        acked = [await owner.produce(channel, f"m-{i}".encode()) for i in range(8)]
        durable_before = await _durable(stack, channel)
        # the owner's own reader: the first time tick, the 8 messages, maybe periodic ticks
        theirs = await _read(owner, channel, policy("all"), 9, read_only=False)
        count = len(theirs)
        ours = await _read(reader, channel, policy("all"), count, read_only=True)
        assert _ids(ours) == _ids(theirs)
        assert [m.payload for m in ours] == [m.payload for m in theirs]
        assert [m.time_tick for m in ours] == [m.time_tick for m in theirs]
        mid = acked[3].message_id
        start = _ids(theirs).index(mid)
        from_mid = await _read(
            reader, channel, policy("start_from", message_id=mid), count - start, read_only=True
        )
        assert _ids(from_mid) == _ids(theirs)[start:]
        after_mid = await _read(
            reader,
            channel,
            policy("start_after", message_id=mid),
            count - start - 1,
            read_only=True,
        )
        assert _ids(after_mid) == _ids(theirs)[start + 1 :]
        by_tick = await _data(
            reader, channel, policy("start_from_time_tick", time_tick=acked[5].time_tick), 3
        )
        assert [m.payload for m in by_tick] == [b"m-5", b"m-6", b"m-7"]
        # latest: only what is appended after the read started (appended until one
        # arrives: when node B's reader is open is not known here)
        latest = asyncio.ensure_future(_data(reader, channel, policy("latest"), 1))
        later: list[Acked] = []
        while not latest.done() and len(later) < 20:
            later.append(await owner.produce(channel, f"late-{len(later)}".encode()))
            await asyncio.wait([latest], timeout=1.0)
        got = await asyncio.wait_for(latest, 30)
        assert got[0].message_id in [a.message_id for a in later]
        # frames too (ConsumeBatch), read-only
        frames = cast(
            AsyncGenerator[list[Consumed], None],
            reader.consume_batches(channel, policy("all"), read_only=True, timeout=30),
        )
        batched: list[Consumed] = []
        async with contextlib.aclosing(frames):
            async for frame in frames:
                batched += frame
                if len(batched) >= count:
                    break
        assert _ids(batched[:count]) == _ids(theirs)
        # node B reads without owning it: the owner still owns and writes, and B added
        # no durable subscription to the topic
        channels = await owner.list_channels()
        assert [c.pchannel for c in channels.channels if not c.fenced] == [channel]
        await owner.produce(channel, b"still-the-owner")
        assert await _durable(stack, channel) == durable_before
        async with NodeClient(b.address) as again:
            listed = await again.list_channels()
            assert channel not in [c.pchannel for c in listed.channels]


async def test_a_read_only_reader_goes_on_while_the_channel_moves_to_another_node(
    nodes: tuple[NodeProcess, NodeProcess, NodeProcess], stack: StackInfo, unique: str
) -> None:
    a, b, c = nodes
    channel = f"ro-move-{unique}"
    async with (
        NodeClient(a.address) as on_a,
        NodeClient(b.address) as on_b,
        NodeClient(c.address) as on_c,
    ):
        await on_a.assign(channel)
        before = [await on_a.produce(channel, f"a-{i}".encode()) for i in range(5)]
        durable_before = await _durable(stack, channel)
        seen: list[Consumed] = []
        stream = on_b.consume(channel, policy("all"), read_only=True)

        async def collect() -> None:
            async for m in stream:
                seen.append(m)

        reading = asyncio.create_task(collect())
        try:
            await _until(lambda: before[-1].message_id in _ids(seen))
            # B's reader fenced nobody: A still writes
            before.append(await on_a.produce(channel, b"a-while-b-reads"))
            # while B reads, its subscriptions on the topic are non-durable readers only
            subs = await _subscriptions(stack, channel)
            assert {n for n, s in subs.items() if s.get("isDurable", True)} == durable_before
            assert any(not s.get("isDurable", True) for s in subs.values())  # B's reader
            opened = await on_c.assign(channel)  # C takes the channel from A
            after = [await on_c.produce(channel, f"c-{i}".encode()) for i in range(5)]
            await _until(lambda: after[-1].message_id in _ids(seen))
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            await stream.aclose()
        # the new owner's reader: A's messages, C's first time tick, C's messages
        owners = await _read(on_c, channel, policy("all"), len(_ids(seen)), read_only=False)
        assert _ids(seen) == _ids(owners)
        payloads = [m.payload for m in seen if m.type != "TimeTick"]
        assert payloads == [f"a-{i}".encode() for i in range(5)] + [b"a-while-b-reads"] + [
            f"c-{i}".encode() for i in range(5)
        ]
        first_c = next(i for i, m in enumerate(seen) if m.time_tick == opened.first_time_tick)
        assert seen[first_c].type == "TimeTick"
        assert all(m.source_node_id == 3 for m in seen[first_c:])
        with pytest.raises(grpc.aio.AioRpcError) as fenced:  # C fenced A, not B
            await on_a.produce(channel, b"a-late")
        assert fenced.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert await _durable(stack, channel) == durable_before
        # B's handle went with its last reader: no reader of B's is left on the topic
        await _until_async(lambda: _non_durable_count(stack, channel), lambda n: n == 0, timeout=15)


async def test_read_only_of_a_channel_that_does_not_exist_is_not_found_and_creates_nothing(
    nodes: tuple[NodeProcess, NodeProcess, NodeProcess], stack: StackInfo, unique: str
) -> None:
    _, b, _ = nodes
    channel = f"ro-missing-{unique}"
    async with NodeClient(b.address) as reader:
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await _read(reader, channel, policy("all"), 1, read_only=True)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        assert "does not exist" in (missing.value.details() or "")
    assert await _admin(stack).get(f"{_topic_path(stack, channel)}/subscriptions") is None


async def _non_durable_count(stack: StackInfo, channel: str) -> int:
    subs = await _subscriptions(stack, channel)
    return sum(1 for s in subs.values() if not s.get("isDurable", True))


async def _until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not seen in time"
        await asyncio.sleep(0.05)


async def _until_async(
    probe: Callable[[], Any], check: Callable[[Any], bool], timeout: float = 30.0
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await probe()
        if check(value):
            return
        assert asyncio.get_running_loop().time() < deadline, f"still {value!r}"
        await asyncio.sleep(0.2)


async def test_the_console_consumes_read_only_from_a_node_that_does_not_own_the_channel(
    nodes: tuple[NodeProcess, NodeProcess, NodeProcess], unique: str
) -> None:
    a, b, _ = nodes
    channel = f"ro-console-{unique}"
    async with NodeClient(a.address) as owner:
        await owner.assign(channel)
        acked = [await owner.produce(channel, f"m-{i}".encode()) for i in range(3)]
    at = ("--node", b.address)
    read = await streamwal_cli(
        "consume", channel, "--read-only", "--json", "--count", "3", "--timeout", "20", *at
    )
    assert read.returncode == 0, read
    lines = [json.loads(line) for line in read.stdout.splitlines()]
    assert [line["id"] for line in lines] == [a.message_id.hex() for a in acked]
    assert [line["payload"] for line in lines] == ["m-0", "m-1", "m-2"]
    # without --read-only, node B answers that it does not hold the channel: exit 3
    owned_only = await streamwal_cli("consume", channel, "--count", "1", "--timeout", "5", *at)
    assert owned_only.returncode == 3, owned_only
    missing = await streamwal_cli(
        "consume", f"ro-nothing-{unique}", "--read-only", "--count", "1", *at
    )
    assert missing.returncode == 3, missing
    assert "does not exist" in missing.stderr
