"""Kill -9 of the owning node during appends; another node takes the channel over.

Node 1 runs the oracle and is never killed. The channel lives on node 2 or 3; each
round SIGKILLs its owner while producers append to it (appends in flight die with
the process), assigns the channel to the other node at once (the dead owner's
producer may still be registered on the broker: the takeover must not wait for it),
and restarts the killed node for the next round.
"""

from __future__ import annotations

import asyncio

from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import hand_over, keep_flowing, owned_traffic, tso_group

__all__ = ["run"]


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("kill-9-owner")
    nodes = await tso_group(env, 3)
    movers = nodes[1:]
    channel = env.name("kill")
    owner = 0
    traffic = await owned_traffic(env, result, movers, channel, workers=3)
    takeovers: list[float] = []
    for round_ in range(rounds):
        await keep_flowing(result, traffic, movers[owner].address, f"round {round_}, before")
        await asyncio.sleep(env.rng.uniform(0.1, 0.5))
        victim, survivor = movers[owner], movers[1 - owner]
        await victim.kill()
        result.faults += 1
        takeovers.append(await hand_over(result, traffic, survivor, f"round {round_}: takeover by"))
        await keep_flowing(result, traffic, survivor.address, f"round {round_}, after")
        await victim.start()
        owner = 1 - owner
        result.rounds += 1
    await env.check(result, [traffic])
    result.figures["takeover after kill, max (s)"] = round(max(takeovers, default=0.0), 3)
    return result
