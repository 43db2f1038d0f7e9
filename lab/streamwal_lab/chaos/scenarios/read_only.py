"""A read-only reader on a node that never owns the channel, through kills and takeovers.

Node 1 runs the oracle, is never killed and never owns the channel: a reader there
consumes the whole channel with ``read_only`` (Milvus's read on any node) from the
first round to the last. The channel lives on node 2 or 3; rounds alternate a SIGKILL
of the owner (the killed node restarts) and a takeover of a live owner (the other
node is assigned the channel and fences it). Expected: the reader's one stream
outlives every change of owner, and the checker's delivery rules hold on what it was
handed: the log's own messages at their ids (``delivered-changed``), in log order and
once each (``delivered-out-of-order``), none of the log skipped between the first and
the last (``delivered-skipped``), every acknowledged append among them
(``ack-undelivered``).
"""

from __future__ import annotations

import asyncio

import grpc

from streamwal.errors import StreamwalError
from streamwal.node.client import NodeClient, policy
from streamwal.tasks import cancel_and_wait
from streamwal.verify.acks import Delivery, digest
from streamwal.verify.cli import verify_channel
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import (
    assign,
    hand_over,
    keep_flowing,
    owned_traffic,
    tso_group,
)

__all__ = ["run"]

_CATCH_UP_S = 60.0


class _Reader:
    """One read-only stream of the whole channel on a node that does not own it."""

    def __init__(self, address: str, channel: str) -> None:
        self.address = address
        self.channel = channel
        self.handed: list[Delivery] = []
        self.payloads: set[bytes] = set()
        self.terms: set[int] = set()  # the terms of the owners that wrote what it got
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="chaos-read-only-reader")

    async def _run(self) -> None:
        try:
            async with NodeClient(self.address, timeout=30, tracing=False) as client:
                async for m in client.consume(self.channel, policy("all"), read_only=True):
                    self.handed.append(Delivery(m.message_id, digest(m.payload)))
                    self.payloads.add(m.payload)
                    self.terms.add(m.term)
        except (grpc.aio.AioRpcError, StreamwalError, OSError) as exc:
            self.error = repr(exc)
        else:
            self.error = "the stream ended"

    async def wait_for(self, payload: bytes, timeout: float) -> bool:
        """Whether ``payload`` reaches the reader within ``timeout`` (while it reads)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while payload not in self.payloads:
            if self.error is not None or loop.time() > deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    async def stop(self) -> None:
        await cancel_and_wait(self._task)


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("read-only-reader")
    nodes = await tso_group(env, 3)
    reader_node, movers = nodes[0], nodes[1:]
    channel = env.name("readonly")
    owner = 0
    traffic = await owned_traffic(env, result, movers, channel, workers=2)
    reader = _Reader(reader_node.address, channel)
    reader.start()
    kinds: dict[str, int] = {}
    try:
        for round_ in range(rounds):
            await keep_flowing(result, traffic, movers[owner].address, f"round {round_}, before")
            await asyncio.sleep(env.rng.uniform(0.1, 0.5))
            victim, survivor = movers[owner], movers[1 - owner]
            kill = round_ % 2 == 0
            if kill:
                await victim.kill()
            await hand_over(result, traffic, survivor, f"round {round_}: takeover by")
            kind = "kill-9-owner" if kill else "takeover"
            kinds[kind] = kinds.get(kind, 0) + 1
            result.faults += 1
            await keep_flowing(result, traffic, survivor.address, f"round {round_}, after")
            if kill:
                await victim.start()
            owner = 1 - owner
            result.rounds += 1
        await traffic.stop()
        sentinel = f"{channel}/sentinel".encode()
        await _append(result, movers[owner].address, channel, sentinel)
        caught_up = await reader.wait_for(sentinel, _CATCH_UP_S)
        result.expect(caught_up, f"the read-only reader never got the last append ({reader.error})")
    finally:
        await reader.stop()
    result.expect(reader.error is None, f"the read-only stream broke: {reader.error}")
    report = await verify_channel(
        env.pulsar_url,
        channel,
        acks=traffic.acks,
        failures=traffic.failures,
        deliveries=reader.handed,
        admin_url=env.admin_url,
    )
    result.absorb(channel, report)
    result.expect(report.deliveries_checked == len(reader.handed), "deliveries went unchecked")
    result.figures["faults by kind"] = kinds
    result.figures["messages handed to the read-only reader"] = len(reader.handed)
    result.figures["terms handed to the reader"] = sorted(reader.terms)
    return result


async def _append(result: ScenarioResult, address: str, channel: str, payload: bytes) -> None:
    """``payload`` appended through the owner at ``address`` (assigned again if the
    traffic's last round left it fenced)."""
    for attempt in (1, 2):
        try:
            async with NodeClient(address, timeout=30, tracing=False) as client:
                await client.produce(channel, payload)
            return
        except (grpc.aio.AioRpcError, StreamwalError) as exc:
            if attempt == 2:
                result.problems.append(f"the last append: {exc!r}")
                return
            await assign(address, channel)
