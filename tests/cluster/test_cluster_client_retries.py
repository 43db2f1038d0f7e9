"""``ClusterClient`` retries an append of unknown outcome with the same numbers, so it
lands once (unit: the real servicer and client over the in-process backend, with a
routing service that names that node)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.cluster import ClusterClient
from streamwal.wal.message import decode_entry
from tests.cluster.static_routing import StaticRouting
from tests.node.memory_node import CounterSource, assign_on, memory_node
from tests.wal.testkit import fast_config

CHANNEL = "followed"


@pytest.fixture
async def node() -> AsyncIterator[tuple[str, MemoryLogStore]]:
    store = MemoryLogStore()
    routing = StaticRouting()

    async with memory_node(1, store, CounterSource(), also=routing.add_to) as (address, _):
        routing.owner = address
        yield address, store


def _payloads(store: MemoryLogStore) -> list[bytes]:
    messages = [
        m for raw in store.entries(CHANNEL) for m in decode_entry(raw, MemoryMessageId.from_bytes)
    ]
    return [m.payload for m in messages if m.payload]


async def test_an_append_of_unknown_outcome_is_retried_and_lands_once(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    await assign_on(address, CHANNEL)
    async with ClusterClient(nodes=[address], tracing=False, retry_for_s=10) as client:
        first = await client.produce(CHANNEL, b"a")
        store.faults.lose_answers = 1  # persisted, then answered "unknown"
        second = await client.produce(CHANNEL, b"b")
        third = await client.produce(CHANNEL, b"c")
    assert _payloads(store) == [b"a", b"b", b"c"]
    assert client.moves_followed == 1
    assert (first.sequence, second.sequence, third.sequence) == (0, 1, 2)
    assert len({first.producer_id, second.producer_id, third.producer_id}) == 1
    landed = [raw.message_id.to_bytes() for raw in store.entries(CHANNEL)]
    assert second.message_id in landed


async def test_a_refused_append_is_not_retried(node: tuple[str, MemoryLogStore]) -> None:
    """A sequence the node refuses for good (a gap) fails at once, unwritten."""
    address, store = node
    await assign_on(address, CHANNEL)
    async with ClusterClient(nodes=[address], tracing=False, retry_for_s=10) as client:
        await client.produce(CHANNEL, b"a")
        # as if a whole window of appends had been lost
        client.producer._next[CHANNEL] = 1 + fast_config().idempotence_window
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.produce(CHANNEL, b"gap")
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert client.moves_followed == 0
        await client.produce(CHANNEL, b"after")  # a fresh producer id goes on
    assert _payloads(store) == [b"a", b"after"]
