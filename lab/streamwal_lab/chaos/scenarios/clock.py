"""A clock jump back on the TSO leader, and a leader change to a node whose clock is behind.

Nodes 1 and 2 run the oracle in-process, each with a test clock (the wall clock plus
an offset read from a file, see :mod:`streamwal_lab.chaos.clock_node`). Each round
moves the leader's clock back by 10 to 60 seconds while appends go on (its physical
time must hold, not go back), puts the other candidate's clock behind as well, then
kills the leader: the candidate takes over with a clock behind the saved window and
must start above it. Every time tick in every channel must stay above the ones before
it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from streamwal_lab.chaos.clock_node import clock_node_command
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import (
    channel_per_node,
    keep_all_flowing,
    move,
    wait_for_leader,
)
from streamwal_lab.chaos.scenarios.tso_leader import candidates, leader_of

__all__ = ["run"]


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("clock-jump-back")
    prefix = "/" + env.name("clock")
    clocks = [env.workdir / "clock-1.ms", env.workdir / "clock-2.ms"]
    offsets = {path: 0 for path in clocks}
    for path in clocks:
        path.write_text("0")
    nodes = await candidates(
        env, prefix, (clock_node_command(clocks[0]), clock_node_command(clocks[1]))
    )
    clock_of = {nodes[0].address: clocks[0], nodes[1].address: clocks[1]}
    home, traffic = await channel_per_node(env, result, nodes, "clock")
    jumps = []
    for round_ in range(rounds):
        await keep_all_flowing(result, traffic, home, f"round {round_}, before")
        leader = await leader_of(env, prefix, nodes)
        follower = next(n for n in nodes[:2] if n is not leader)
        back_ms = env.rng.randint(10_000, 60_000)
        _shift(offsets, clock_of[leader.address], -back_ms)
        jumps.append(back_ms)
        result.faults += 1
        before = leader.log_text().count("wall clock went back")
        await keep_all_flowing(result, traffic, home, f"round {round_}, jumped")
        await asyncio.sleep(0.3)
        result.expect(
            leader.log_text().count("wall clock went back") > before,
            f"round {round_}: the leader did not notice its clock going back",
        )
        _shift(offsets, clock_of[follower.address], -env.rng.randint(10_000, 60_000))
        await leader.kill()
        result.faults += 2
        for t in traffic:
            if home[t.channel] == leader.address:
                target = env.rng.choice([n for n in nodes if n is not leader])
                if await move(result, t, target.address, f"round {round_}"):
                    home[t.channel] = target.address
        await keep_all_flowing(result, traffic, home, f"round {round_}, after", 60)
        named = await wait_for_leader(env.etcd_endpoint, prefix, [follower.address])
        result.expect(named is not None, f"round {round_}: the candidate did not take over")
        # appends go on with timestamps of a leader whose clock is behind
        await keep_all_flowing(result, traffic, home, f"round {round_}, led")
        await leader.start()
        result.rounds += 1
    await env.check(result, traffic)
    result.figures["clock jumps back (s)"] = [round(ms / 1000, 1) for ms in jumps]
    return result


def _shift(offsets: dict[Path, int], path: Path, delta_ms: int) -> None:
    offsets[path] += delta_ms
    path.write_text(str(offsets[path]))
