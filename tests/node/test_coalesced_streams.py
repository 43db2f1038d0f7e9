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
from streamwal.node.client import Acked, AppendStream, NodeClient, policy, write_outcome
from streamwal.node.client.coalescer import FRAME_APPENDS
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
        # and none holds more than a frame's bound: many in flight go as several
        assert frames >= -(-len(payloads) // FRAME_APPENDS), frames
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


async def test_streams_of_one_client_on_one_channel_share_a_call_and_keep_their_order(
    client: NodeClient, channel: str
) -> None:
    streams = [client.open_stream(channel) for _ in range(8)]
    alone = client.open_stream(channel, coalesce=False)
    other_type = client.open_stream(channel, type="delete")
    shared = streams[0]._call
    assert all(s._call is shared for s in streams) and shared.users == 8
    assert alone._call is not shared and other_type._call is not shared

    async def one_by_one(i: int, stream: AppendStream) -> list[Acked]:
        return [await stream.append(f"s{i}-{k:02d}".encode()) for k in range(20)]

    answers = await asyncio.gather(*(one_by_one(i, s) for i, s in enumerate(streams)))
    assert shared.frames < 8 * 20 // 2, shared.frames  # the streams' appends met in frames
    await streams[0].close()  # the others go on on the same call
    more = await streams[1].append(b"after-one-closed")
    for s in (*streams[1:], alone, other_type):
        await s.close()
    assert shared.done and not client._stream_calls
    logged = await _logged(client, channel, more)
    order = list(logged.values())
    for i, acked in enumerate(answers):
        mine = [f"s{i}-{k:02d}".encode() for k in range(20)]
        assert [logged[a.message_id] for a in acked] == mine  # each answer its own
        assert [p for p in order if p.startswith(f"s{i}-".encode())] == mine  # in order
    again = client.open_stream(channel)  # the closed call is not reused
    try:
        assert again._call is not shared
        await again.append(b"again")
    finally:
        await again.close()


async def test_a_shared_call_that_ends_fails_every_stream_and_the_next_open_gets_a_new_one(
    client: NodeClient, channel: str
) -> None:
    a, b = client.open_stream(channel), client.open_stream(channel)
    await asyncio.gather(a.append(b"a"), b.append(b"b"))
    a._call._call.cancel()  # the call ends under both streams
    for stream in (a, b):
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await stream.append(b"too late")
        assert failed.value.code() == grpc.StatusCode.CANCELLED
    fresh = client.open_stream(channel)
    try:
        assert fresh._call is not a._call
        await fresh.append(b"fresh")
    finally:
        for stream in (a, b, fresh):
            await stream.close()
    assert not client._stream_calls
