"""The node's native front (``node.front: native``), end to end: a ``streamwal serve``
child whose clients reach it through ``streamwal-front`` (built by ``./dev``), on the
stack's broker and etcd, with auth on.

What must hold through the front, as without it: every acknowledged append is in the
log once, in the order of its time ticks; a refused append says so with its status and
its write outcome; an idempotent retry is answered with the first result; auth refuses
a wrong token before anything is written; the front ends with its node, SIGKILL too.
And the unary calls do reach the node in shared frames (the front's own count).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.server.front import FRONT_BINARY, front_binary
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, serve_once, wait_port_closed

pytestmark = pytest.mark.integration

_TOKEN = "front-test-token"
_AUTH = (("authorization", f"Bearer {_TOKEN}"),)
_OUTCOME = "streamwal-write-outcome"


def _settings(stack: StackInfo, key_prefix: str, **node: object) -> dict[str, object]:
    return {
        "node": {"front": "native", **node},
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "tso": {"mode": "in-process", "key_prefix": key_prefix},
        "auth": {
            "enabled": True,
            "identities": [
                {
                    "name": "all",
                    "roles": ["admin", "producer", "consumer"],
                    "token_env": "FRONT_TOKEN",
                }
            ],
        },
    }


@pytest.fixture
async def front_node(
    tmp_path: Path, stack: StackInfo, etcd_prefix: Callable[[str], str]
) -> AsyncIterator[NodeProcess]:
    front_binary("")  # the test needs the binary ./dev builds: say so, not skip
    node = NodeProcess(tmp_path, 1, _settings(stack, etcd_prefix("front")))
    await node.start(env={"FRONT_TOKEN": _TOKEN})
    try:
        yield node
    finally:
        await node.terminate()


def _status(exc: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str | None]:
    trailing = dict(exc.trailing_metadata() or ())
    return exc.code(), trailing.get(_OUTCOME)


async def test_unary_produce_through_the_front_lands_once_in_tick_order(
    front_node: NodeProcess, channel: str
) -> None:
    async with grpc.aio.insecure_channel(front_node.address) as ch:
        stub = pb_grpc.StreamingNodeStub(ch)
        await stub.AssignChannel(pb.AssignChannelRequest(pchannel=channel), metadata=_AUTH)

        async def produce(i: int) -> pb.ProduceResponse:
            message = pb.Message(type="Insert", payload=b"p%d" % i, properties={"_k": str(i)})
            request = pb.ProduceRequest(pchannel=channel, message=message)
            answer: pb.ProduceResponse = await stub.Produce(request, metadata=_AUTH)
            return answer

        answers = await asyncio.gather(*(produce(i) for i in range(200)))
        ticks = {a.time_tick for a in answers}
        assert len(ticks) == 200  # each append its own tick
        # read everything back: each acknowledged payload once, ticks rising in log order
        seen: dict[bytes, int] = {}
        last_tick = 0
        consume = stub.Consume(
            pb.ConsumeRequest(
                pchannel=channel, policy=pb.DeliveryPolicy(all=pb.Empty()), appended_only=True
            ),
            metadata=_AUTH,
        )
        async for msg in consume:
            if msg.wal_record:
                continue
            assert msg.time_tick > last_tick
            last_tick = msg.time_tick
            assert msg.payload not in seen
            seen[msg.payload] = msg.time_tick
            assert msg.properties["_k"] == msg.payload[1:].decode()
            if len(seen) == 200:
                break
        consume.cancel()
        by_payload = {b"p%d" % i: a.time_tick for i, a in enumerate(answers)}
        assert seen == by_payload
    await front_node.terminate()
    coalesced, frames, _ = _front_counts(front_node)
    assert coalesced == 200
    assert 1 <= frames < coalesced  # callers shared frames


def _front_counts(node: NodeProcess) -> tuple[int, int, int]:
    """What the front said on its graceful stop: calls coalesced, frames, calls forwarded."""
    said = re.search(
        rb"(\d+) Produce calls coalesced into (\d+) frames, (\d+) calls forwarded",
        node.log_path.read_bytes(),
    )
    assert said is not None, node.log_text()[-2000:]
    return int(said[1]), int(said[2]), int(said[3])


async def test_a_node_that_traces_every_call_gets_every_call_forwarded(
    tmp_path: Path, stack: StackInfo, etcd_prefix: Callable[[str], str], channel: str
) -> None:
    """A coalesced call has no span in the node: a node whose sampler starts a trace
    for each call that comes without one must see each call."""
    settings = {**_settings(stack, etcd_prefix("front")), "tracing": {"sampler": "always_on"}}
    node = NodeProcess(tmp_path, 1, settings)
    await node.start(env={"FRONT_TOKEN": _TOKEN})
    try:
        async with grpc.aio.insecure_channel(node.address) as ch:
            stub = pb_grpc.StreamingNodeStub(ch)
            await stub.AssignChannel(pb.AssignChannelRequest(pchannel=channel), metadata=_AUTH)
            message = pb.Message(type="insert", payload=b"p")
            request = pb.ProduceRequest(pchannel=channel, message=message)
            answers = await asyncio.gather(
                *(stub.Produce(request, metadata=_AUTH) for _ in range(40))
            )
        assert len({a.time_tick for a in answers}) == 40
    finally:
        await node.terminate()
    coalesced, frames, forwarded = _front_counts(node)
    assert (coalesced, frames) == (0, 0)
    assert forwarded >= 41  # the assign and every Produce


async def test_refusals_and_idempotent_retries_through_the_front(
    front_node: NodeProcess, channel: str
) -> None:
    async with grpc.aio.insecure_channel(front_node.address) as ch:
        stub = pb_grpc.StreamingNodeStub(ch)
        message = pb.Message(type="Insert", payload=b"once")
        # a channel that is not open here: NOT_FOUND, nothing written
        with pytest.raises(grpc.aio.AioRpcError) as not_here:
            await stub.Produce(pb.ProduceRequest(pchannel=channel, message=message), metadata=_AUTH)
        assert _status(not_here.value) == (grpc.StatusCode.NOT_FOUND, "not-written")
        assert channel in (not_here.value.details() or "")
        await stub.AssignChannel(pb.AssignChannelRequest(pchannel=channel), metadata=_AUTH)
        # a wrong token: refused before anything is written
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Produce(
                pb.ProduceRequest(pchannel=channel, message=message),
                metadata=(("authorization", "Bearer wrong"),),
            )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # no message at all: INVALID_ARGUMENT, as the node says it
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await stub.Produce(pb.ProduceRequest(pchannel=channel), metadata=_AUTH)
        assert _status(invalid.value) == (grpc.StatusCode.INVALID_ARGUMENT, "not-written")
        # the same producer id and sequence twice, concurrently and again: one append
        numbered = pb.ProduceRequest(pchannel=channel, message=message, producer_id=7, sequence=0)
        first, again = await asyncio.gather(
            stub.Produce(numbered, metadata=_AUTH), stub.Produce(numbered, metadata=_AUTH)
        )
        later = await stub.Produce(numbered, metadata=_AUTH)
        assert first.message_id == again.message_id == later.message_id
        assert first.time_tick == again.time_tick == later.time_tick
        # a producer id without a sequence is bad input, alone in its frame or not
        with pytest.raises(grpc.aio.AioRpcError) as half:
            await stub.Produce(
                pb.ProduceRequest(pchannel=channel, message=message, producer_id=8),
                metadata=_AUTH,
            )
        assert _status(half.value) == (grpc.StatusCode.INVALID_ARGUMENT, "not-written")


async def test_the_front_ends_with_its_node(front_node: NodeProcess) -> None:
    port = front_node.port
    await front_node.kill()  # SIGKILL: no chance to stop its child
    for _ in range(100):  # the kernel delivers PR_SET_PDEATHSIG at once; allow 10 s
        if wait_port_closed(port):
            break
        await asyncio.sleep(0.1)
    assert wait_port_closed(port), "the front outlived its node"


def test_front_refusals_name_the_fix(tmp_path: Path, stack: StackInfo) -> None:
    tls = _settings(stack, "/unused", tls={"cert_file": "/x.pem", "key_file": "/x.key"})
    path = tmp_path / "tls.yaml"
    NodeProcess(tmp_path, 1, tls).config_path.rename(path)
    done = serve_once(path, {**os.environ, "FRONT_TOKEN": _TOKEN})
    assert done.returncode == 2, done.stderr
    assert "node.front" in done.stderr and "TLS" in done.stderr
    missing = _settings(stack, "/unused", front_binary=str(tmp_path / FRONT_BINARY))
    path = tmp_path / "missing.yaml"
    NodeProcess(tmp_path, 1, missing).config_path.rename(path)
    done = serve_once(path, {**os.environ, "FRONT_TOKEN": _TOKEN})
    assert done.returncode == 1, done.stderr
    assert FRONT_BINARY in done.stderr and "does not exist" in done.stderr
