"""The gRPC service and the remote source, on oracles sharing an in-memory store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import grpc
import pytest
from grpc import aio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamwal.errors import InvalidInputError, NotLeaderError, UnavailableError
from streamwal.tso.allocator import LocalAllocator
from streamwal.tso.config import TsoConfig
from streamwal.tso.memory_store import MemoryStore
from streamwal.tso.oracle import TimestampOracle
from streamwal.tso.proto import tso_pb2, tso_pb2_grpc
from streamwal.tso.remote import RemoteSource
from streamwal.tso.service import LEADER_METADATA_KEY, TsoServer, TsoServicer

_CONFIG = TsoConfig(key_prefix="/svc", lease_ttl_s=1, update_interval_s=0.01)


class Cluster:
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.servers: list[TsoServer] = []
        self.oracles: list[TimestampOracle] = []


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """Two nodes, each an oracle with its own TSO server; the first one leads."""
    result = Cluster()
    async with AsyncExitStack() as stack:
        for _ in range(2):
            server = TsoServer(None, "127.0.0.1:0")
            await server.start()
            stack.push_async_callback(server.close)
            oracle = TimestampOracle(_CONFIG, address=server.address, store=result.store)
            server.attach(oracle)
            await oracle.start()
            stack.push_async_callback(oracle.close)
            if not result.oracles:
                await oracle.wait_serving(2.0)
            result.servers.append(server)
            result.oracles.append(oracle)
        yield result


async def test_a_follower_answers_failed_precondition_naming_the_leader(cluster: Cluster) -> None:
    leader, follower = cluster.servers
    async with aio.insecure_channel(follower.address) as channel:
        stub = tso_pb2_grpc.TSOStub(channel)
        with pytest.raises(aio.AioRpcError) as info:
            await stub.AllocTimestamp(tso_pb2.AllocTimestampRequest(count=1), timeout=5)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    trailing = dict(info.value.trailing_metadata() or ())
    assert trailing[LEADER_METADATA_KEY] == leader.address


async def test_the_leader_returns_the_top_of_the_range(cluster: Cluster) -> None:
    async with aio.insecure_channel(cluster.servers[0].address) as channel:
        stub = tso_pb2_grpc.TSOStub(channel)
        first = await stub.AllocTimestamp(tso_pb2.AllocTimestampRequest(count=1), timeout=5)
        second = await stub.AllocTimestamp(tso_pb2.AllocTimestampRequest(count=100), timeout=5)
        # the range (second - 99 .. second) lies above first; exactly adjacent when the
        # oracle's physical clock did not move on between the two calls
        assert second.timestamp >= first.timestamp + 100
        if second.timestamp >> 18 == first.timestamp >> 18:
            assert second.timestamp == first.timestamp + 100
        assert second.count == 100
        with pytest.raises(aio.AioRpcError) as info:
            await stub.AllocTimestamp(tso_pb2.AllocTimestampRequest(count=1 << 18), timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_the_remote_source_follows_the_leader(cluster: Cluster) -> None:
    leader, follower = cluster.servers
    async with RemoteSource([follower.address]) as source:
        allocator = LocalAllocator(source, batch_size=50)
        values = [await allocator.allocate() for _ in range(200)]
        assert values == sorted(set(values))
        assert source.leader == leader.address
        with pytest.raises(InvalidInputError):
            await source.fetch(0)


async def test_the_remote_source_follows_a_new_leader(cluster: Cluster) -> None:
    old_leader, new_leader = cluster.servers
    async with RemoteSource([old_leader.address, new_leader.address], timeout_s=5.0) as source:
        before = await source.fetch(10)
        await cluster.oracles[0].close()  # resigns; the other node takes over
        after = await source.fetch(10)
        assert after > before
        assert source.leader == new_leader.address


async def test_a_follower_without_a_reachable_leader_gives_typed_errors() -> None:
    store = MemoryStore()
    async with TsoServer(None, "127.0.0.1:0") as unattached:
        async with RemoteSource(unattached.address, timeout_s=0.3) as source:
            with pytest.raises(UnavailableError):
                await source.fetch(1)
        leader = TimestampOracle(_CONFIG, address="", store=store)  # serves in-process only
        await leader.start()
        follower = TimestampOracle(_CONFIG, address=unattached.address, store=store)
        try:
            await leader.wait_serving(2.0)
            unattached.attach(follower)
            await follower.start()
            async with RemoteSource(unattached.address, timeout_s=0.5) as source:
                with pytest.raises(NotLeaderError):
                    await source.fetch(1)
        finally:
            await follower.close()
            await leader.close()


async def test_each_call_names_the_serving_node_on_its_span() -> None:
    """A node names itself on the TSO's server spans (a move's trace crosses nodes)."""

    class Fixed:
        async def generate(self, count: int = 1) -> int:
            return 42

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(__name__)
    named = TsoServicer(Fixed(), span_attributes={"streamwal.node.id": 3})
    plain = TsoServicer(Fixed())
    for name, servicer in (("named", named), ("plain", plain)):
        with tracer.start_as_current_span(name):
            answer = await servicer.AllocTimestamp(tso_pb2.AllocTimestampRequest(count=1), None)
        assert answer.timestamp == 42
    spans = {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}
    assert spans == {"named": {"streamwal.node.id": 3}, "plain": {}}
