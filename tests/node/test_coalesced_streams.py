"""Appends on a coalescing stream (``open_stream``'s default), through a real node
process on the real broker: what waits to be sent goes as one frame, and every append
is still answered on its own, in order, with its own numbers; an invalid one fails
alone and the stream goes on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from streamwal.errors import WriteOutcome
from streamwal.node.client import Acked, NodeClient, policy, write_outcome
from streamwal_lab.stack import StackInfo
from tests.etcd_keys import EtcdPrefixes
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration

MAX_PAYLOAD = 4096


@pytest.fixture(scope="module")
async def node(
    stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[NodeProcess]:
    prefixes = EtcdPrefixes(stack.etcd_endpoint)
    settings = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "tso": {"mode": "in-process", "key_prefix": prefixes.new("coalesce")},
        "wal": {"max_message_bytes": MAX_PAYLOAD},
    }
    process = NodeProcess(tmp_path_factory.mktemp("coalesce"), 1, settings)
    try:
        await process.start()
        yield process
    finally:
        await process.terminate()
        await prefixes.delete_all()


@pytest.fixture
async def client(node: NodeProcess, channel: str) -> AsyncIterator[NodeClient]:
    """A client of the node, with ``channel`` assigned there."""
    async with NodeClient(node.address) as opened:
        await opened.assign(channel)
        yield opened


async def _logged(client: NodeClient, channel: str, last: Acked) -> dict[bytes, bytes]:
    """Message id to payload, from the start of the log to ``last``."""
    logged: dict[bytes, bytes] = {}
    async for m in client.consume(channel, policy("all"), timeout=30):
        if m.type != "TimeTick":
            logged[m.message_id] = m.payload
        if m.message_id == last.message_id:
            return logged
    raise AssertionError("the log ended before the last append")


@pytest.mark.parametrize("coalesce", [True, False])
async def test_appends_in_flight_are_answered_each_with_its_own_message(
    client: NodeClient, channel: str, coalesce: bool
) -> None:
    async with client.open_stream(channel, coalesce=coalesce) as stream:
        payloads = [f"p-{i:03d}".encode() for i in range(300)]
        acked = await asyncio.gather(*(stream.append(p) for p in payloads))
        frames = stream.frames
    if coalesce:
        assert frames < len(payloads) // 4, frames  # many appends per frame
    else:
        assert frames == len(payloads)
    ticks = [a.time_tick for a in acked]
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
    start = acked[0].sequence
    assert start is not None
    assert [a.sequence for a in acked] == list(range(start, start + len(payloads)))
    logged = await _logged(client, channel, acked[-1])
    # in the log in the order they were made, each acknowledged with its own id
    assert list(logged.values()) == payloads
    assert [logged[a.message_id] for a in acked] == payloads


async def test_an_invalid_append_fails_alone_and_its_frame_lands(
    client: NodeClient, channel: str
) -> None:
    async with client.open_stream(channel) as stream:
        payloads = [b"a", b"b", b"x" * (MAX_PAYLOAD + 1), b"c", b"d"]
        results = await asyncio.gather(
            *(stream.append(p) for p in payloads), return_exceptions=True
        )
        assert stream.frames == 1  # made together: one frame
        invalid = results[2]
        assert isinstance(invalid, grpc.aio.AioRpcError)
        assert invalid.code() == grpc.StatusCode.INVALID_ARGUMENT, invalid.details()
        assert write_outcome(invalid) is WriteOutcome.NOT_WRITTEN
        acked = [r for i, r in enumerate(results) if i != 2]
        assert all(isinstance(r, Acked) for r in acked), results
        # the stream goes on after it
        later = await stream.append(b"e")
    logged = await _logged(client, channel, later)
    assert list(logged.values()) == [b"a", b"b", b"c", b"d", b"e"]


async def test_a_gap_in_the_numbers_splits_the_frame_and_every_number_holds(
    client: NodeClient, channel: str
) -> None:
    async with client.open_stream(channel) as stream:
        # a unary append between them takes the number in the middle
        first, unary, second, third = await asyncio.gather(
            stream.append(b"s1"),
            client.produce(channel, b"u"),
            stream.append(b"s2"),
            stream.append(b"s3"),
        )
        assert stream.frames == 2  # s1, then s2 and s3 (numbered on from the unary)
    start = first.sequence
    assert start is not None
    numbers = [a.sequence for a in (first, unary, second, third)]
    assert numbers == [start, start + 1, start + 2, start + 3]
    assert len({first.producer_id, unary.producer_id, second.producer_id}) == 1
    logged = await _logged(client, channel, max((first, unary, second, third), key=_tick))
    assert sorted(logged.values()) == [b"s1", b"s2", b"s3", b"u"]


def _tick(acked: Acked) -> int:
    return acked.time_tick


async def test_appends_waiting_when_the_channel_is_not_here_fail_each_not_written(
    node: NodeProcess, channel: str
) -> None:
    async with NodeClient(node.address) as client:
        async with client.open_stream(channel) as stream:
            results = await asyncio.gather(
                *(stream.append(b"%d" % i) for i in range(20)), return_exceptions=True
            )
            assert all(isinstance(r, grpc.aio.AioRpcError) for r in results), results
            codes = {r.code() for r in results if isinstance(r, grpc.aio.AioRpcError)}
            assert codes == {grpc.StatusCode.NOT_FOUND}
            assert {write_outcome(r) for r in results if isinstance(r, BaseException)} == {
                WriteOutcome.NOT_WRITTEN
            }
            await client.assign(channel)
            acked = await asyncio.gather(*(stream.append(b"after %d" % i) for i in range(20)))
        assert len(acked) == 20


@pytest.mark.parametrize("coalesce", [True, False])
async def test_a_payload_that_is_not_bytes_fails_its_own_call_only(
    client: NodeClient, channel: str, coalesce: bool
) -> None:
    async with client.open_stream(channel, coalesce=coalesce) as stream:

        async def text() -> Acked:
            return await stream.append("not bytes")  # type: ignore[arg-type]

        results = await asyncio.gather(
            stream.append(b"a"), text(), stream.append(b"b"), return_exceptions=True
        )
        assert isinstance(results[1], TypeError), results
        assert isinstance(results[0], Acked) and isinstance(results[2], Acked), results
        # numbered without a gap: the refused one took no number
        assert results[2].sequence == (results[0].sequence or 0) + 1
        later = await stream.append(b"c")
    logged = await _logged(client, channel, later)
    assert list(logged.values()) == [b"a", b"b", b"c"]
