"""A consumer that checkpoints while owners are killed and the channel is truncated.

Node 1 runs the oracle; the channel lives on node 2 or 3, whose WALs truncate every
half second with a retention window of 0: only the consumer's checkpoint holds the
log. A consumer reads the channel through the owning node, resuming after its own
checkpoint whenever its stream breaks, and checkpoints every few messages. Each round
SIGKILLs the owner and assigns the channel to the other node. Expected: the truncation
point moves, never past the consumer's checkpoint; the consumer, resuming from its
checkpoint across owners, sees every acknowledged append after its first checkpoint;
the checker finds no violation in the log kept after the truncation point.
"""

from __future__ import annotations

import asyncio
import time

import grpc

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.node.client import NodeClient, policy
from streamwal.tasks import cancel_and_wait
from streamwal.verify.acks import digest
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import hand_over, keep_flowing, owned_traffic, tso_group

__all__ = ["run"]

CONSUMER = "chaos-consumer"
_CHECKPOINT_EVERY = 10


class _Consumer:
    """Reads ``channel`` after its checkpoint from the node it prefers; checkpoints."""

    def __init__(self, channel: str, address: str) -> None:
        self.channel = channel
        self.address = address
        self.seen: set[str] = set()  # digests of the inserts consumed
        self.first_checkpoint: PulsarMessageId | None = None
        self.checkpoint: PulsarMessageId | None = None
        self.resumes = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="chaos-consumer")

    async def _run(self) -> None:
        while True:
            address = self.address
            try:
                async with NodeClient(address, timeout=5) as client:
                    await self._consume(client)
            except (grpc.aio.AioRpcError, OSError, TimeoutError):
                pass  # the owner died or moved: resume after the checkpoint
            self.resumes += 1
            await asyncio.sleep(0.2)

    async def _consume(self, client: NodeClient) -> None:
        count = 0
        start = policy("after_checkpoint", consumer=CONSUMER)
        async for m in client.consume(self.channel, start):
            if self.address != client.address:
                return  # the channel moved: follow it
            if m.type != "TimeTick":
                self.seen.add(digest(m.payload))
            count += 1
            if count % _CHECKPOINT_EVERY == 0:
                await client.checkpoint(self.channel, CONSUMER, m.message_id, m.time_tick)
                self.checkpoint = PulsarMessageId.from_bytes(m.message_id)
                self.first_checkpoint = self.first_checkpoint or self.checkpoint

    async def stop(self) -> None:
        await cancel_and_wait(self._task)


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("checkpoints")
    sections: dict[str, dict[str, object]] = {"wal": {"retention": 0, "truncate_interval": 0.5}}
    nodes = await tso_group(env, 3, sections=sections)
    movers = nodes[1:]
    channel = env.name("ckpt")
    owner = 0
    traffic = await owned_traffic(env, result, movers, channel, workers=2)
    consumer = _Consumer(channel, movers[owner].address)
    consumer.start()
    points: list[PulsarMessageId] = []
    try:
        for round_ in range(rounds):
            await keep_flowing(result, traffic, movers[owner].address, f"round {round_}, before")
            await asyncio.sleep(1.5)  # checkpoints and truncation rounds happen
            await _sample(result, movers[owner].address, channel, consumer, points, round_)
            victim, survivor = movers[owner], movers[1 - owner]
            await victim.kill()
            result.faults += 1
            await hand_over(result, traffic, survivor, f"round {round_}: takeover by")
            consumer.address = survivor.address
            await keep_flowing(result, traffic, survivor.address, f"round {round_}, after")
            await victim.start()
            owner = 1 - owner
            result.rounds += 1
        await traffic.stop()
        await _catch_up(result, consumer, traffic.acks)
    finally:
        await consumer.stop()
    result.expect(len(set(points)) >= 1, "the channel was never truncated")
    await env.check(result, [traffic])
    result.figures["truncation points seen"] = len(set(points))
    result.figures["consumer resumes"] = consumer.resumes
    return result


async def _sample(
    result: ScenarioResult,
    address: str,
    channel: str,
    consumer: _Consumer,
    points: list[PulsarMessageId],
    round_: int,
) -> None:
    """The truncation point never passes the consumer's checkpoint."""
    async with NodeClient(address, timeout=10) as client:
        try:
            state = await client.retention(channel)
        except grpc.aio.AioRpcError as exc:
            result.problems.append(f"round {round_}: GetRetention: {exc.code().name}")
            return
    registered = {c.consumer: c for c in state.consumers}
    result.expect(CONSUMER in registered, f"round {round_}: the consumer's checkpoint is gone")
    if not state.truncated_before or CONSUMER not in registered:
        return
    point = PulsarMessageId.from_bytes(state.truncated_before)
    checkpoint = PulsarMessageId.from_bytes(registered[CONSUMER].message_id)
    points.append(point)
    result.expect(
        point <= checkpoint,
        f"round {round_}: truncated before {point}, past the checkpoint {checkpoint}",
    )


async def _catch_up(result: ScenarioResult, consumer: _Consumer, acks: list) -> None:  # type: ignore[type-arg]
    """Every append acknowledged after the consumer's first checkpoint reaches it."""
    deadline = time.monotonic() + 30
    while True:
        first = consumer.first_checkpoint
        due = {
            a.digest
            for a in acks
            if first is not None and PulsarMessageId.from_bytes(a.message_id) > first
        }
        missing = due - consumer.seen
        if not missing or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    result.expect(first is not None, "the consumer never checkpointed")
    result.expect(not missing, f"the consumer never saw {len(missing)} acknowledged appends")
    result.figures["appends consumed after the first checkpoint"] = len(due)
