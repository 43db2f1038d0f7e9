"""Terms and fenced channels through the node's gRPC API (unit: two real servicers and
the real client over one in-process backend and one term store, as two nodes share a
broker and an etcd)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryOpener
from streamwal.errors import (
    ChannelNotFoundError,
    InvalidInputError,
    StaleTermError,
)
from streamwal.node.channels import ChannelManager
from streamwal.node.client import BatchProduceError, NodeClient
from streamwal.node.client_errors import NodeFencedError, NodeStaleTermError
from streamwal.node.terms import ChannelTerm, MemoryTerms, decode_term, encode_term, next_term
from streamwal.tso import LocalAllocator
from streamwal.wal import WAL, open_wal
from tests.node.memory_node import CounterSource, memory_node
from tests.wal.testkit import fast_config

CHANNEL = "terms"


@pytest.fixture
async def two_nodes() -> AsyncIterator[tuple[NodeClient, NodeClient, MemoryTerms]]:
    store, terms, source = MemoryLogStore(), MemoryTerms(), CounterSource()
    async with (
        memory_node(1, store, source, terms) as (a, _),
        memory_node(2, store, source, terms) as (b, _),
        NodeClient(a, tracing=False) as ca,
        NodeClient(b, tracing=False) as cb,
    ):
        yield ca, cb, terms


async def _every_write(
    client: NodeClient, txn: int, channel: str = CHANNEL
) -> list[grpc.aio.AioRpcError]:
    """Each kind of write on ``channel`` (``txn`` open on its vchannel ``v``), each
    refused: its error."""
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "produce": lambda: client.produce(channel, b"x"),
        "produce stream": lambda: client.produce_stream(channel, [b"s1", b"s2"]),
        "batch": lambda: client.produce_batch(channel, [b"b1", b"b2"]),
        "batch stream": lambda: client.produce_batches(channel, [[b"b1"], [b"b2"]]),
        "begin txn": lambda: client.begin_txn(channel, "v"),
        "append in txn": lambda: client.produce(channel, b"t", vchannel="v", txn_id=txn),
        "commit txn": lambda: client.commit_txn(channel, txn),
    }
    errors: list[grpc.aio.AioRpcError] = []
    for name, call in calls.items():
        try:
            await call()
        except BatchProduceError as exc:
            assert len(exc.failed) == len(exc.results), (name, exc)
            errors.extend(exc.failed.values())
        except grpc.aio.AioRpcError as exc:
            errors.append(exc)
        else:
            raise AssertionError(f"{name} on a fenced channel was accepted")
    return errors


def test_the_term_rule() -> None:
    held = ChannelTerm(CHANNEL, 3, node=1)
    assert next_term(CHANNEL, None, 1, None) == 1
    assert next_term(CHANNEL, held, 2, None) == 4
    assert next_term(CHANNEL, held, 1, 3) == 3  # the holder reopens with its term
    assert next_term(CHANNEL, held, 2, 5) == 5
    assert next_term(CHANNEL, None, 2, 0) == 0
    with pytest.raises(StaleTermError) as lower:
        next_term(CHANNEL, held, 1, 2)
    assert (lower.value.term, lower.value.current, lower.value.holder) == (2, 3, 1)
    with pytest.raises(StaleTermError):
        next_term(CHANNEL, held, 2, 3)  # the same term on another node
    for bad in (-1, True, "2", 1.5):
        with pytest.raises(InvalidInputError):
            next_term(CHANNEL, held, 1, bad)  # type: ignore[arg-type]
    assert decode_term(encode_term(held)) == held


async def test_a_fenced_channel_answers_fenced_on_every_write_until_removed(
    two_nodes: tuple[NodeClient, NodeClient, MemoryTerms],
) -> None:
    a, b, terms = two_nodes
    opened = await a.assign(CHANNEL, term=1)
    assert opened.term == 1
    await a.produce(CHANNEL, b"before")
    txn = await a.begin_txn(CHANNEL, "v")
    await a.produce(CHANNEL, b"in txn", vchannel="v", txn_id=txn)
    taken = await b.assign(CHANNEL, term=2)
    assert taken.term == 2
    held = await terms.read(CHANNEL)
    assert held is not None and (held.term, held.node) == (2, 2)

    for _ in range(3):  # said every time, not once and then NOT_FOUND
        for error in await _every_write(a, txn):
            assert isinstance(error, NodeFencedError), repr(error)
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "fenced" in (error.details() or ""), error.details()
        listed = await a.list_channels()
        assert [(c.pchannel, c.fenced, c.term) for c in listed.channels] == [(CHANNEL, True, 1)]
    # b owns it, under term 2
    assert [(c.pchannel, c.fenced, c.term) for c in (await b.list_channels()).channels] == [
        (CHANNEL, False, 2)
    ]
    await b.produce(CHANNEL, b"after")

    # a's own term is stale now; b's again is accepted
    with pytest.raises(StaleTermError) as stale:
        await a.assign(CHANNEL, term=1)
    assert isinstance(stale.value, NodeStaleTermError)
    assert stale.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (stale.value.details() or "").startswith("stale term")
    with pytest.raises(StaleTermError):
        await a.assign(CHANNEL, term=2)  # b's term, from another node
    assert (await b.assign(CHANNEL, term=2)).term == 2
    await b.produce(CHANNEL, b"still b")

    # removing it from a ends the refusals: the channel is simply not there
    await a.remove(CHANNEL)
    assert list((await a.list_channels()).channels) == []
    with pytest.raises(ChannelNotFoundError):
        await a.produce(CHANNEL, b"x")
    # and a takes it back with the next term when it asks for none
    assert (await a.assign(CHANNEL)).term == 3
    await a.produce(CHANNEL, b"a again")


async def test_without_a_term_store_the_node_refuses_a_term_below_its_own() -> None:
    store, source = MemoryLogStore(), CounterSource()
    async with (
        memory_node(1, store, source) as (address, channels),
        NodeClient(address, tracing=False) as client,
    ):
        assert (await client.assign(CHANNEL, term=5)).term == 5
        assert (await client.assign(CHANNEL, term=5)).term == 5
        with pytest.raises(NodeStaleTermError):
            await client.assign(CHANNEL, term=4)
        assert (await client.assign(CHANNEL)).term == 6
        assert channels.term_of(CHANNEL) == 6
        with pytest.raises(InvalidInputError):
            await client.assign(CHANNEL, term=-1)


async def test_an_open_that_a_newer_claim_overtook_is_given_up() -> None:
    """Two opens race: each claim passes, then the lower term's open fences last. It
    must not stay: it closes its WAL and says its term is stale."""
    store, terms = MemoryLogStore(), MemoryTerms()

    async def overtaken(*args: Any, **kwargs: Any) -> WAL:
        await terms.claim(CHANNEL, 2, None)  # node 2's claim lands while node 1 opens
        return await open_wal(*args, **kwargs)

    channels = ChannelManager(
        MemoryOpener(store),
        lambda: LocalAllocator(CounterSource()),
        1,
        fast_config(),
        overtaken,
        terms=terms,
    )
    try:
        with pytest.raises(StaleTermError) as stale:
            await channels.assign(CHANNEL)
        assert (stale.value.term, stale.value.current, stale.value.holder) == (1, 2, 2)
        assert channels.channels() == [] and channels.fenced_channels() == []
        with pytest.raises(ChannelNotFoundError):
            await channels.get(CHANNEL)
    finally:
        await channels.close()
