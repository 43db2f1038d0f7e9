"""The node end to end through gRPC, as processes on the real stack."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from adaptors.pulsar import PulsarMessageId
from node.acks import Ack, digest
from node.client import NodeClient, policy, status_of
from node.stack import StackInfo
from node.verify import verify_channel
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration


@pytest.fixture
async def two_nodes(
    stack: StackInfo, tmp_path: Path, unique: str
) -> AsyncIterator[tuple[NodeProcess, NodeProcess]]:
    common = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
    }
    one = NodeProcess(
        tmp_path, 1, {**common, "tso": {"mode": "in-process", "key_prefix": f"/e2e-{unique}"}}
    )
    await one.start()
    two = NodeProcess(
        tmp_path, 2, {**common, "tso": {"mode": "remote", "remote_addresses": [one.address]}}
    )
    await two.start()
    yield one, two
    await two.terminate()
    await one.terminate()


async def test_produce_consume_round_trip(
    two_nodes: tuple[NodeProcess, NodeProcess], unique: str
) -> None:
    one, _ = two_nodes
    channel = f"e2e-rt-{unique}"
    async with NodeClient(one.address) as client:
        opened = await client.assign(channel)
        acked = [
            await client.produce(channel, f"m-{i}".encode(), vchannel=f"v{i % 2}")
            for i in range(20)
        ]
        acked += await client.produce_stream(channel, [f"s-{i}".encode() for i in range(50)])
        ticks = [a.time_tick for a in acked]
        assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
        assert ticks[0] > opened.first_time_tick
        got = []
        async for m in client.consume(channel, policy("all")):
            got.append(m)
            if m.message_id == acked[-1].message_id:
                break
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
        async for m in client.consume(
            channel, policy("start_after", message_id=acked[9].message_id)
        ):
            if m.type != "TimeTick":
                after.append(m.payload)
            if len(after) == 3:
                break
        assert after == [b"m-10", b"m-11", b"m-12"]
        state = await client.mvcc(channel, "v1")
        assert state.time_tick >= acked[19].time_tick


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
                    codes.append(status_of(exc))
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
        # node 1 dropped the channel: its next listing reports it fenced, once
        listing = await c1.list_channels()
        assert channel in listing.fenced
        assert channel not in [c.pchannel for c in listing.channels]
        assert channel not in (await c1.list_channels()).fenced
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c1.produce(channel, b"late")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()
    acks_file = tmp_path / "acks.jsonl"
    acks_file.write_text("".join(a.to_json() + "\n" for a in acks))
    report = await verify_channel(stack.pulsar_url, channel, acks_file)
    assert report.ok, report.summary()
    assert report.acks_checked == 400
    assert [node for node, _ in report.owners] == [1, 2]


async def test_sigterm_during_traffic_loses_no_acknowledged_message(
    two_nodes: tuple[NodeProcess, NodeProcess], unique: str, stack: StackInfo, tmp_path: Path
) -> None:
    _, two = two_nodes
    channel = f"e2e-term-{unique}"
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
        assert await two.terminate() == 0
        for w in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(w, 30)
    acks_file = tmp_path / "acks.jsonl"
    acks_file.write_text("".join(a.to_json() + "\n" for a in acks))
    report = await verify_channel(stack.pulsar_url, channel, acks_file)
    assert report.ok, report.summary()
    assert report.acks_checked == len(acks) >= 200


async def test_bad_requests_get_typed_codes_and_the_node_keeps_serving(
    two_nodes: tuple[NodeProcess, NodeProcess], unique: str
) -> None:
    one, _ = two_nodes
    channel = f"e2e-bad-{unique}"

    async def code_of(call: object) -> grpc.StatusCode | None:
        try:
            await call  # type: ignore[misc]
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return None

    async with NodeClient(one.address) as client:
        assert await code_of(client.produce(f"nowhere-{unique}", b"x")) == grpc.StatusCode.NOT_FOUND
        assert await code_of(client.assign("bad name!")) == grpc.StatusCode.INVALID_ARGUMENT
        await client.assign(channel)
        bad_type = client.produce(channel, b"x", type="no-such-type")
        assert await code_of(bad_type) == grpc.StatusCode.INVALID_ARGUMENT
        system = client.produce(channel, b"x", type="TimeTick")
        assert await code_of(system) == grpc.StatusCode.INVALID_ARGUMENT
        reserved = client.produce(channel, b"x", properties={"_tt": "1"})
        assert await code_of(reserved) == grpc.StatusCode.INVALID_ARGUMENT
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
        await stream.aclose()
        # the node still serves
        ack = await client.produce(channel, b"still-serving")
        assert ack.time_tick > 0
