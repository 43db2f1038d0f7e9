"""``ClusterClient.consume(read_only=True)``: a read that does not need the owner, so a
move does not end it (unit: two real servicers over one in-process log store)."""

from __future__ import annotations

import asyncio
import contextlib

from streamwal.cluster import ClusterClient
from streamwal.node.client import Consumed
from tests.cluster.test_cluster_client_calls import CHANNEL, _Nodes, nodes

__all__ = ["nodes"]  # the fixture, shared with the calls' tests


async def test_a_read_only_read_goes_on_through_a_move_without_following_it(
    nodes: _Nodes,
) -> None:
    async with (
        ClusterClient(nodes=nodes.addresses, tracing=False, retry_for_s=10) as client,
        ClusterClient(nodes=nodes.addresses, tracing=False, retry_for_s=10) as reading,
    ):
        await client.produce(CHANNEL, b"a")
        await client.produce(CHANNEL, b"b")
        got: list[Consumed] = []
        stream = reading.consume(CHANNEL, read_only=True)

        async def read() -> None:
            async for message in stream:
                if message.type == "Insert":
                    got.append(message)
                if message.payload == b"d":
                    return

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.2)
        await nodes.move_to(1)  # node 0 is fenced: an owner's read there would end
        await client.produce(CHANNEL, b"c")
        await client.produce(CHANNEL, b"d")
        try:
            await asyncio.wait_for(reader, 20)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await stream.aclose()
        assert reading.moves_followed == 0  # the read never had to look for the owner
    assert [m.payload for m in got] == [b"a", b"b", b"c", b"d"]
