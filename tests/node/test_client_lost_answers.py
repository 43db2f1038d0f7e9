"""An append is never reported "not written" when an earlier try of it may have been
(unit: the real servicer and both clients over the in-process backend).

The sequence that lost acknowledged appends: ``a`` lands; ``b``'s first try lands and
its answer is lost; the retry finds the node unreachable (a connection never made,
which alone would mean "not written"); the client gave up with "not written" and
handed ``b``'s number back, so ``c`` went out with it and was answered with ``b``'s
result, acknowledged and never written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.cluster import ClusterClient
from streamwal.errors import OutcomeUnknownError, StreamwalError, WriteOutcome
from streamwal.node.client import NodeClient
from streamwal.node.client_errors import NodeChannelNotFoundError, NodeOutcomeUnknownError
from streamwal.wal.message import decode_entry
from tests.cluster.test_cluster_client_retries import CHANNEL
from tests.cluster.test_cluster_client_retries import node as node
from tests.node.memory_node import assign_on


def _landed(store: MemoryLogStore) -> list[tuple[bytes, bytes]]:
    """(payload, message id) of every user message in the log, in log order."""
    messages = [
        m for raw in store.entries(CHANNEL) for m in decode_entry(raw, MemoryMessageId.from_bytes)
    ]
    return [(m.payload, m.message_id.to_bytes()) for m in messages if m.payload]


class _Cut:
    """Wraps a client's ``Produce`` stub: while ``cut``, a call fails as a connection
    that was never made (gRPC's own text for it), so nothing reaches the node."""

    def __init__(self, client: NodeClient) -> None:
        self.cut = False
        self.refused = 0
        self._real = client._stub.Produce
        client._stub.Produce = self

    async def __call__(self, request: Any, timeout: float | None = None) -> Any:
        if self.cut:
            self.refused += 1
            empty = grpc.aio.Metadata()
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE,
                empty,
                empty,
                "failed to connect to all addresses; last error: UNKNOWN: Connection refused",
            )
        return await self._real(request, timeout=timeout)


class _LoseThenCut:
    """The first try reaches the node and its answer is lost; then the node is cut."""

    def __init__(self, client: NodeClient, store: MemoryLogStore) -> None:
        self._cut = _Cut(client)
        self._store = store
        client._stub.Produce = self

    def arm(self) -> None:
        self._store.faults.lose_answers = 1

    def heal(self) -> None:
        self._cut.cut = False

    @property
    def refused(self) -> int:
        return self._cut.refused

    async def __call__(self, request: Any, timeout: float | None = None) -> Any:
        try:
            return await self._cut(request, timeout=timeout)
        finally:
            if self._store.faults.lose_answers == 0 and self._cut.refused == 0:
                self._cut.cut = True  # the answer was just lost: cut the node off


@pytest.fixture
async def assigned(node: tuple[str, MemoryLogStore]) -> AsyncIterator[tuple[str, MemoryLogStore]]:
    address, store = node
    await assign_on(address, CHANNEL)
    yield address, store


async def test_node_client_reports_unknown_and_never_reuses_the_number(
    assigned: tuple[str, MemoryLogStore],
) -> None:
    address, store = assigned
    async with NodeClient(address, tracing=False, retries=3) as client:
        a = await client.produce(CHANNEL, b"a")
        faults = _LoseThenCut(client, store)
        faults.arm()
        with pytest.raises(OutcomeUnknownError) as unknown:
            await client.produce(CHANNEL, b"b")
        assert faults.refused == 3  # every retry was refused before reaching the node
        error = unknown.value
        assert isinstance(error, NodeOutcomeUnknownError)
        assert isinstance(error, StreamwalError)
        assert error.outcome is WriteOutcome.UNKNOWN
        assert error.code() == grpc.StatusCode.UNAVAILABLE  # the last try's status
        assert (error.producer_id, error.sequence) == (a.producer_id, 1)
        faults.heal()
        c = await client.produce(CHANNEL, b"c")
    landed = _landed(store)
    assert [payload for payload, _ in landed] == [b"a", b"b", b"c"]
    assert (c.producer_id, c.sequence) != (a.producer_id, 1)  # b's number was not reused
    assert c.message_id == landed[2][1]  # c acknowledged at its own position


async def test_node_client_resolves_an_unknown_try_by_retrying_it(
    assigned: tuple[str, MemoryLogStore],
) -> None:
    """The retry that reaches the node is answered with the first try's result."""
    address, store = assigned
    async with NodeClient(address, tracing=False, retries=3) as client:
        await client.produce(CHANNEL, b"a")
        store.faults.lose_answers = 1
        b = await client.produce(CHANNEL, b"b")
        c = await client.produce(CHANNEL, b"c")
    landed = _landed(store)
    assert [payload for payload, _ in landed] == [b"a", b"b", b"c"]
    assert (b.message_id, c.message_id) == (landed[1][1], landed[2][1])


async def test_cluster_client_reports_unknown_and_never_reuses_the_number(
    assigned: tuple[str, MemoryLogStore],
) -> None:
    address, store = assigned
    async with ClusterClient(nodes=[address], tracing=False, retry_for_s=0.4) as client:
        a = await client.produce(CHANNEL, b"a")
        faults = _LoseThenCut(client._node(address), store)
        faults.arm()
        with pytest.raises(OutcomeUnknownError) as unknown:
            await client.produce(CHANNEL, b"b")
        assert faults.refused >= 1
        assert unknown.value.outcome is WriteOutcome.UNKNOWN
        faults.heal()
        c = await client.produce(CHANNEL, b"c")
    landed = _landed(store)
    assert [payload for payload, _ in landed] == [b"a", b"b", b"c"]
    assert (c.producer_id, c.sequence) != (a.producer_id, 1)
    assert c.message_id == landed[2][1]


async def test_a_single_try_budget_still_never_says_not_written_of_a_lost_answer(
    assigned: tuple[str, MemoryLogStore],
) -> None:
    """The shortest budget: one try, its answer lost. Unknown, and the number moves on."""
    address, store = assigned
    async with NodeClient(address, tracing=False, retries=0) as client:
        a = await client.produce(CHANNEL, b"a")
        store.faults.lose_answers = 1
        with pytest.raises(OutcomeUnknownError):
            await client.produce(CHANNEL, b"b")
        c = await client.produce(CHANNEL, b"c")
    landed = _landed(store)
    assert [payload for payload, _ in landed] == [b"a", b"b", b"c"]
    assert (c.producer_id, c.sequence) != (a.producer_id, 1)


async def test_a_refused_try_alone_hands_the_number_back(
    assigned: tuple[str, MemoryLogStore],
) -> None:
    """Known not written on every try: the number is reused, nothing is lost."""
    address, store = assigned
    async with NodeClient(address, tracing=False, retries=2) as client:
        a = await client.produce(CHANNEL, b"a")
        cut = _Cut(client)
        cut.cut = True
        with pytest.raises(StreamwalError) as refused:
            await client.produce(CHANNEL, b"b")
        assert refused.value.outcome is WriteOutcome.NOT_WRITTEN
        assert not isinstance(refused.value, OutcomeUnknownError)
        cut.cut = False
        c = await client.produce(CHANNEL, b"c")
    assert [payload for payload, _ in _landed(store)] == [b"a", b"c"]
    assert (c.producer_id, c.sequence) == (a.producer_id, 1)


async def test_client_errors_are_typed(assigned: tuple[str, MemoryLogStore]) -> None:
    address, _ = assigned
    async with NodeClient(address, tracing=False) as client:
        with pytest.raises(NodeChannelNotFoundError) as missing:
            await client.produce("no-such-channel", b"x")
    assert missing.value.outcome is WriteOutcome.NOT_WRITTEN
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
