"""Concurrent unary appends of one client share calls, each still answered, numbered
and failed on its own (unit: the real servicer and client over the in-process backend;
``tests/node/test_native_front.py`` and the chaos scenarios run it against real nodes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.errors import WriteOutcome
from streamwal.node.client import Acked, NodeClient
from streamwal.node.client.coalescer import ProduceCoalescer
from streamwal.node.client_errors import (
    NodeCallError,
    NodeChannelNotFoundError,
    NodeInvalidInputError,
)
from streamwal.wal.message import decode_entry
from tests.node.memory_node import CounterSource, assign_on, memory_node

CHANNEL = "coalesced"


@pytest.fixture
async def node() -> AsyncIterator[tuple[str, MemoryLogStore]]:
    store = MemoryLogStore()
    async with memory_node(1, store, CounterSource()) as (address, _channels):
        await assign_on(address, CHANNEL)
        yield address, store


def _landed(store: MemoryLogStore) -> dict[bytes, bytes]:
    """message id -> payload of every caller's message in the log."""
    messages = [
        m for raw in store.entries(CHANNEL) for m in decode_entry(raw, MemoryMessageId.from_bytes)
    ]
    return {m.message_id.to_bytes(): m.payload for m in messages if m.payload}


def _coalescer(client: NodeClient) -> ProduceCoalescer:
    coalescer = client._coalescer
    assert coalescer is not None
    return coalescer


async def test_concurrent_appends_share_frames_and_each_gets_its_own_answer(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    async with NodeClient(address, tracing=False) as client:
        payloads = [f"m{i}".encode() for i in range(200)]
        acked = await asyncio.gather(*(client.produce(CHANNEL, p) for p in payloads))
        coalescer = _coalescer(client)
        assert coalescer.frames > 0 and coalescer.coalesced > coalescer.frames
        assert not coalescer._lanes  # an idle channel is forgotten
    landed = _landed(store)
    assert len(landed) == len(payloads)
    # every caller's answer is where its own payload is, with its own numbers
    assert [landed[a.message_id] for a in acked] == payloads
    assert len({a.sequence for a in acked}) == len(payloads)
    assert all(a.producer_id == client.producer.producer_id for a in acked)  # type: ignore[union-attr]
    ticks = sorted(a.time_tick for a in acked)
    assert len(set(ticks)) == len(ticks)


async def test_a_retried_number_lands_once_when_it_shares_a_frame(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    async with NodeClient(address, tracing=False) as client:
        producer = client.producer
        assert producer is not None
        first = await client.produce(CHANNEL, b"once", sequence=7)
        busy = [client.produce(CHANNEL, f"other{i}".encode()) for i in range(8)]
        again = [client.produce(CHANNEL, b"once", sequence=7) for _ in range(4)]
        answers = await asyncio.gather(*busy, *again)
        assert _coalescer(client).frames > 0
    assert all(a == first for a in answers[8:])
    assert list(_landed(store).values()).count(b"once") == 1


async def test_an_invalid_append_fails_alone_and_the_others_land(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    async with NodeClient(address, tracing=False) as client:
        calls = [client.produce(CHANNEL, f"ok{i}".encode()) for i in range(6)]
        calls.insert(4, client.produce(CHANNEL, b"bad", type="t" * 70_000))
        answers = await asyncio.gather(*calls, return_exceptions=True)
        assert _coalescer(client).frames > 0  # the bad one was in a frame
    (bad,) = [a for a in answers if not isinstance(a, Acked)]
    assert isinstance(bad, NodeInvalidInputError)
    assert "65,535 bytes" in bad.details()
    assert answers.index(bad) == 4
    assert sorted(_landed(store).values()) == sorted(f"ok{i}".encode() for i in range(6))


async def test_a_refused_frame_fails_each_append_with_the_typed_error(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, _store = node
    async with NodeClient(address, tracing=False) as client:
        answers = await asyncio.gather(
            *(client.produce("not-here", f"x{i}".encode()) for i in range(10)),
            return_exceptions=True,
        )
        assert _coalescer(client).frames > 0
    assert all(isinstance(a, NodeChannelNotFoundError) for a in answers)
    assert len({id(a) for a in answers}) == len(answers)  # one error object per caller
    assert all(a.sequence is not None for a in answers if isinstance(a, NodeChannelNotFoundError))


async def test_a_caller_cancelled_while_queued_is_never_sent(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    async with NodeClient(address, tracing=False) as client:
        calls = [asyncio.ensure_future(client.produce(CHANNEL, f"k{i}".encode())) for i in range(8)]
        await asyncio.sleep(0)  # all started: one alone in flight, seven queued
        assert len(_coalescer(client)._lanes[CHANNEL].queued) == 7
        calls[5].cancel()
        answers = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(answers[5], asyncio.CancelledError)
    assert sorted(_landed(store).values()) == sorted(f"k{i}".encode() for i in range(8) if i != 5)


async def test_a_sampled_caller_goes_alone_under_its_span(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, _store = node
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    async with NodeClient(address, tracer_provider=provider) as client:

        async def traced(i: int) -> Acked:
            with tracer.start_as_current_span(f"caller-{i}"):
                return await client.produce(CHANNEL, f"t{i}".encode())

        await asyncio.gather(*(traced(i) for i in range(10)))
        assert _coalescer(client).frames == 0
    spans = exporter.get_finished_spans()
    callers = {s.context.span_id for s in spans if s.name.startswith("caller-")}
    produce = [s for s in spans if s.name.endswith("/Produce")]
    assert len(produce) == 10
    assert {s.parent.span_id for s in produce if s.parent is not None} == callers


async def test_without_coalescing_each_append_is_a_call(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    async with NodeClient(address, tracing=False, coalesce=False) as client:
        assert client._coalescer is None
        await asyncio.gather(*(client.produce(CHANNEL, f"s{i}".encode()) for i in range(20)))
    assert len(_landed(store)) == 20


async def test_closing_the_client_under_queued_appends_answers_every_one(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    client = NodeClient(address, tracing=False)
    calls = [asyncio.ensure_future(client.produce(CHANNEL, f"c{i}".encode())) for i in range(16)]
    await asyncio.sleep(0)
    await client.close()
    async with asyncio.timeout(10):  # none is left waiting
        answers = await asyncio.gather(*calls, return_exceptions=True)
    acked = [a for a in answers if isinstance(a, Acked)]
    # the calls in flight end as grpc.aio ends calls on a closed channel (cancelled);
    # the queued ones were never sent: not written
    cancelled = sum(isinstance(a, asyncio.CancelledError) for a in answers)
    unsent = [a for a in answers if isinstance(a, NodeCallError)]
    assert unsent and all(a.code() == grpc.StatusCode.CANCELLED for a in unsent)
    assert all(a.outcome is WriteOutcome.NOT_WRITTEN for a in unsent)
    assert len(acked) + len(unsent) + cancelled == 16
    landed = _landed(store)
    assert all(landed[a.message_id] == f"c{answers.index(a)}".encode() for a in acked)
