"""A node's real servicer over the in-process backend, for unit tests of its gRPC API:
the server and channel manager that several test modules build the same way."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from streamwal.adaptors.memory import MemoryLogStore, MemoryOpener
from streamwal.node.channels import ChannelManager
from streamwal.node.client import Consumed, NodeClient, policy
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.servicer import NodeServicer
from streamwal.node.terms import ChannelTerms
from streamwal.tso import LocalAllocator
from streamwal.wal.config import WALConfig
from tests.wal.testkit import fast_config

__all__ = ["CounterSource", "assign_on", "memory_node", "read_from_start"]


class CounterSource:
    """A timestamp source: a plain counter (shared by several nodes, as one TSO is)."""

    def __init__(self) -> None:
        self._next = 1000

    async def fetch(self, count: int) -> int:
        self._next += count
        return self._next - 1

    async def close(self) -> None:
        return None


@contextlib.asynccontextmanager
async def memory_node(
    node_id: int,
    store: MemoryLogStore,
    source: CounterSource,
    terms: ChannelTerms | None = None,
    *,
    also: Callable[[grpc.aio.Server], None] | None = None,
    config: WALConfig | None = None,
) -> AsyncIterator[tuple[str, ChannelManager]]:
    """A started gRPC server for node ``node_id`` over ``store``: its address and its
    channel manager; stopped and closed on exit. ``also`` adds services of its own to
    the same server (a cluster's routing, say) before it starts."""
    opener = MemoryOpener(store)
    channels = ChannelManager(
        opener, lambda: LocalAllocator(source), node_id, config or fast_config(), terms=terms
    )
    server = grpc.aio.server()
    pb_grpc.add_StreamingNodeServicer_to_server(NodeServicer(channels, opener), server)
    if also is not None:
        also(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", channels
    finally:
        await server.stop(None)
        await channels.close()


async def assign_on(address: str, channel: str) -> None:
    """Open ``channel`` on the node at ``address`` as an operator's ``AssignChannel``
    does, through a client of its own that is closed after."""
    async with NodeClient(address, tracing=False) as admin:
        await admin.assign(channel)


async def read_from_start(
    client: NodeClient, channel: str, count: int, **options: Any
) -> list[Consumed]:
    """The first ``count`` messages a read of ``channel`` from its start delivers, within
    5 s (``options``: the read's own, ``vchannel`` or ``read_only``)."""
    got = client.consume(channel, policy("all"), limit=count, timeout=5, **options)
    return [m async for m in got]
