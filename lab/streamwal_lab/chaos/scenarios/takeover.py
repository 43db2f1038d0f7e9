"""Takeover races: four nodes take one channel over in random order while clients write.

Each round assigns the channel to a node picked at random among the three that do
not own it, while the producers keep appending to the node they believe owns it: the
old owner has appends in flight when the new owner fences it, and its clients learn
of the move only from a FAILED_PRECONDITION answer. After each assign the new owner
must accept an append at once (an assign that answers OK leaves that node the owner).
A second channel stays on one node the whole time, written too: a takeover touches
only the channel taken over, so not one of its appends may fail.
"""

from __future__ import annotations

import asyncio
import time

import grpc

from streamwal.node.client import NodeClient
from streamwal.verify.cli import verify_channel
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import assign, tso_group
from streamwal_lab.chaos.traffic import Traffic

__all__ = ["run"]


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("takeover-race")
    nodes = await tso_group(env, 4)
    addresses = [n.address for n in nodes]
    channel = env.name("race")
    owner = env.rng.choice(addresses)
    first = await assign(owner, channel)
    result.expect(not isinstance(first, grpc.StatusCode), f"first assign failed: {first}")
    traffic = env.traffic(channel, addresses, workers=4)
    traffic.prefer(owner)
    await traffic.start()
    stayer = env.name("stayer")
    home = env.rng.choice(addresses)
    placed = await assign(home, stayer)
    result.expect(not isinstance(placed, grpc.StatusCode), f"assigning {stayer}: {placed}")
    staying = env.traffic(stayer, [home], workers=2)
    await staying.start()
    slowest = 0.0
    for round_ in range(rounds):
        await asyncio.sleep(env.rng.uniform(0.05, 0.3))
        target = env.rng.choice([a for a in addresses if a != owner])
        t0 = time.monotonic()
        answer = await assign(target, channel)
        slowest = max(slowest, time.monotonic() - t0)
        result.faults += 1
        result.rounds += 1
        if isinstance(answer, grpc.StatusCode):
            result.problems.append(f"round {round_}: assign to {target} failed: {answer.name}")
            continue
        owner = target
        async with NodeClient(owner, timeout=30, tracing=False) as client:
            try:
                await client.produce(channel, f"{channel}/owner-check/{round_}".encode())
            except grpc.aio.AioRpcError as exc:
                result.problems.append(
                    f"round {round_}: {owner} answered the assign but refused an append: "
                    f"{exc.code().name} {exc.details()}"
                )
        traffic.prefer(owner)
    await env.check(result, [traffic])
    await _check_stayer(env, result, staying)
    result.figures["slowest takeover (s)"] = round(slowest, 3)
    result.expect(
        result.ownerships >= rounds + 1,
        f"{result.ownerships} ownerships in the log for {rounds} takeovers",
    )
    return result


async def _check_stayer(env: ChaosEnv, result: ScenarioResult, staying: Traffic) -> None:
    """Not one failed append, and a log the checker passes; its one ownership is not
    counted with the raced channel's (one per takeover)."""
    await staying.stop()
    channel = staying.channel
    result.expect(
        not staying.codes, f"{channel} never moved, yet appends failed: {dict(staying.codes)}"
    )
    result.expect(bool(staying.acks), f"{channel}: no append was acknowledged")
    report = await verify_channel(env.pulsar_url, channel, acks=staying.acks)
    result.violations.extend(f"{channel}: {v}" for v in report.violations)
    result.acked_violations += report.acked_violations
    result.acks_checked += report.acks_checked
    result.messages += report.messages
