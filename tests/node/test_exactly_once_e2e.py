"""Exactly once on the real stack: an append whose answer is lost after the broker
persisted it, retried (by the client, or through the next owner), lands once; a
transaction cut by a takeover is never delivered."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId
from streamwal.node.client import NodeClient, policy
from streamwal.node.idempotence import ProducerIdentity
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import read_topic, verify_channel
from streamwal.wal.config import WALConfig
from streamwal.wal.message import ImmutableMessage, decode_entry
from streamwal_lab.faultproxy import FaultProxy
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess
from tests.node.test_node_e2e import oracle, two_nodes

__all__ = ["oracle", "two_nodes"]  # the fixtures, shared with the node's end-to-end tests

pytestmark = pytest.mark.integration


async def _messages(stack: StackInfo, channel: str) -> list[ImmutableMessage]:
    """Every message of the channel's log, decoded (a v2 entry frames its payload)."""
    log = await read_topic(stack.pulsar_url, PulsarConfig().topic(channel))
    return [m for e in log for m in decode_entry(e, PulsarMessageId.from_bytes)]


async def _copies(stack: StackInfo, channel: str, payload: bytes) -> list[ImmutableMessage]:
    return [m for m in await _messages(stack, channel) if m.payload == payload]


async def _until_persisted(stack: StackInfo, channel: str, payload: bytes) -> None:
    async with asyncio.timeout(30):
        while not await _copies(stack, channel, payload):
            await asyncio.sleep(0.05)


async def _lose_the_answer(
    proxy: FaultProxy, stack: StackInfo, channel: str, payload: bytes, produce: asyncio.Future[Any]
) -> None:
    """The request reaches the node, the broker persists it, the answer never comes
    back and the connection is cut."""
    await _until_persisted(stack, channel, payload)
    assert not produce.done()
    proxy.drop_answers = False
    proxy.reset()


async def test_an_append_whose_answer_is_lost_is_retried_and_lands_once(
    two_nodes: tuple[NodeProcess, NodeProcess], channel: str, stack: StackInfo
) -> None:
    one, _ = two_nodes
    async with (
        FaultProxy(one.port) as proxy,
        NodeClient(proxy.url_host, retries=5, tracing=False) as client,
    ):
        await client.assign(channel)
        await client.produce(channel, b"warm-up")
        proxy.drop_answers = True
        produce = asyncio.create_task(client.produce(channel, b"once"))
        await _lose_the_answer(proxy, stack, channel, b"once", produce)
        acked = await asyncio.wait_for(produce, 60)
        assert proxy.resets == 1
    copies = await _copies(stack, channel, b"once")
    assert len(copies) == 1
    assert acked.message_id == copies[0].message_id.to_bytes()
    report = await verify_channel(
        stack.pulsar_url, channel, acks=[Ack(acked.message_id, acked.time_tick, digest(b"once"))]
    )
    assert report.ok, report.summary()
    assert report.idempotent == 2


async def test_an_append_whose_answer_is_lost_is_retried_through_the_next_owner(
    two_nodes: tuple[NodeProcess, NodeProcess], channel: str, stack: StackInfo
) -> None:
    one, two = two_nodes
    identity = ProducerIdentity()
    async with (
        FaultProxy(one.port) as proxy,
        NodeClient(proxy.url_host, tracing=False, producer=identity) as c1,
        NodeClient(two.address, tracing=False, producer=identity) as c2,
    ):
        await c1.assign(channel)
        await c1.produce(channel, b"warm-up")
        # numbered by the caller, who retries it through the next owner
        pid, seq = identity.producer_id, identity.next_sequence(channel)
        proxy.drop_answers = True
        produce = asyncio.create_task(c1.produce(channel, b"once", producer_id=pid, sequence=seq))
        await _until_persisted(stack, channel, b"once")
        await c2.assign(channel)  # the next owner; node 1 is fenced
        await _lose_the_answer(proxy, stack, channel, b"once", produce)
        with pytest.raises(grpc.aio.AioRpcError):
            await produce  # no retries on this client: the caller retries elsewhere
        acked = await c2.produce(channel, b"once", producer_id=pid, sequence=seq)
        assert (acked.producer_id, acked.sequence) == (pid, seq)
        with pytest.raises(grpc.aio.AioRpcError) as gap:
            await c2.produce(
                channel,
                b"skips",
                producer_id=pid,
                sequence=seq + 5 + WALConfig().idempotence_window,
            )
        assert gap.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    copies = await _copies(stack, channel, b"once")
    assert len(copies) == 1
    assert acked.message_id == copies[0].message_id.to_bytes()
    report = await verify_channel(stack.pulsar_url, channel)
    assert report.ok, report.summary()
    assert [node for node, _ in report.owners] == [1, 2]


async def test_a_transaction_cut_by_a_takeover_is_never_delivered(
    two_nodes: tuple[NodeProcess, NodeProcess], channel: str, stack: StackInfo
) -> None:
    one, two = two_nodes
    async with (
        NodeClient(one.address, tracing=False) as c1,
        NodeClient(two.address, tracing=False) as c2,
    ):
        await c1.assign(channel)
        committed = await c1.begin_txn(channel, "v")
        await c1.produce(channel, b"kept-1", vchannel="v", txn_id=committed)
        await c1.commit_txn(channel, committed)
        cut = await c1.begin_txn(channel, "v")
        await c1.produce(channel, b"cut-1", vchannel="v", txn_id=cut)
        await c1.produce(channel, b"cut-2", vchannel="v", txn_id=cut)
        await c2.assign(channel)
        with pytest.raises(grpc.aio.AioRpcError) as old:
            await c1.commit_txn(channel, cut)
        assert old.value.code() in (
            grpc.StatusCode.FAILED_PRECONDITION,  # the commit met the fence
            grpc.StatusCode.ABORTED,  # a time tick met it first
            grpc.StatusCode.NOT_FOUND,  # and the node dropped the channel
        )
        with pytest.raises(grpc.aio.AioRpcError) as new:
            await c2.commit_txn(channel, cut)
        assert new.value.code() == grpc.StatusCode.ABORTED
        await c2.produce(channel, b"after", vchannel="v")
        delivered = []
        async for m in c2.consume(channel, policy("all"), vchannel="v", timeout=30):
            delivered.append(m)
            if m.payload == b"after":
                break
    payloads = [m.payload for m in delivered if m.type == "insert"]
    assert payloads == [b"kept-1", b"after"]
    report = await verify_channel(
        stack.pulsar_url, channel, delivered=[m.message_id for m in delivered]
    )
    assert report.ok, report.summary()
    assert report.transactions == {"committed": 1, "cut": 1}


async def test_concurrent_appends_of_one_client_are_all_taken_once(
    two_nodes: tuple[NodeProcess, NodeProcess], channel: str, stack: StackInfo
) -> None:
    """One idempotent client, many appends at once: the node handles them as separate
    calls and they may reach the WAL out of order; none is refused as a gap, and each
    is in the log once (the node bench's 32 callers once got a gap error here)."""
    one, _ = two_nodes
    async with NodeClient(one.address, tracing=False) as client:
        await client.assign(channel)
        for burst in range(5):
            acked = await asyncio.gather(
                *(client.produce(channel, b"c-%d-%d" % (burst, i)) for i in range(64))
            )
            assert len({a.sequence for a in acked}) == 64
    log = await _messages(stack, channel)
    payloads = [m.payload for m in log if m.payload.startswith(b"c-")]
    assert sorted(payloads) == sorted({b"c-%d-%d" % (b, i) for b in range(5) for i in range(64)})
