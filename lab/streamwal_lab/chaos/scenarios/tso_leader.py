"""TSO leader killed: another node running the oracle in-process takes over.

Nodes 1 and 2 both run the oracle in-process (candidates on one etcd key prefix);
node 3 takes timestamps from them over gRPC. Each node owns a channel under load.
Each round SIGKILLs the node whose oracle leads, moves its channel to another node
at once, and expects: the other candidate leads once the dead leader's lease ends,
appends resume on every channel, and every time tick stays above the ones before it
(the new leader starts above the window the old one saved). The killed node comes
back as a candidate for the next round.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from streamwal_lab.chaos.env import ChaosEnv, node_settings
from streamwal_lab.chaos.nodes import SERVE, NodeProcess
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import (
    channel_per_node,
    keep_all_flowing,
    leader_address,
    move,
    start_all,
    wait_for_leader,
)

__all__ = ["candidates", "run"]


async def candidates(
    env: ChaosEnv,
    key_prefix: str,
    commands: tuple[Sequence[str], Sequence[str]] = (SERVE, SERVE),
) -> list[NodeProcess]:
    """Nodes 1 and 2 run the oracle in-process, each started with its ``commands``
    entry; node 3 asks them (started, in order)."""
    tso = {"mode": "in-process", "key_prefix": key_prefix, "batch_size": 100}
    settings = node_settings(env.pulsar_url, env.etcd_endpoint, tso)
    one = env.node(1, settings, commands[0])
    await one.start()
    two = env.node(2, settings, commands[1])
    await two.start()
    remote = {
        "mode": "remote",
        "remote_addresses": [one.address, two.address],
        "batch_size": 100,
        "key_prefix": key_prefix,  # the channels' terms, beside the oracle's
    }
    three = env.node(3, node_settings(env.pulsar_url, env.etcd_endpoint, remote))
    await start_all([three])
    return [one, two, three]


async def leader_of(env: ChaosEnv, key_prefix: str, nodes: list[NodeProcess]) -> NodeProcess:
    address = await asyncio.to_thread(leader_address, env.etcd_endpoint, key_prefix)
    for node in nodes:
        if node.address == address:
            return node
    raise RuntimeError(f"no node leads the TSO (leader key names {address!r})")


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("tso-leader-kill")
    prefix = "/" + env.name("tso")
    nodes = await candidates(env, prefix)
    home, traffic = await channel_per_node(env, result, nodes, "tso")
    failovers = []
    for round_ in range(rounds):
        await keep_all_flowing(result, traffic, home, f"round {round_}, before")
        leader = await leader_of(env, prefix, nodes)
        await asyncio.sleep(env.rng.uniform(0.1, 0.5))
        await leader.kill()
        result.faults += 1
        t0 = time.monotonic()
        alive = [n for n in nodes if n is not leader]
        for t in traffic:
            if home[t.channel] == leader.address:
                target = env.rng.choice(alive)
                if await move(result, t, target.address, f"round {round_}"):
                    home[t.channel] = target.address
        alive_addresses = [n.address for n in alive if n.node_id in (1, 2)]
        named = await wait_for_leader(env.etcd_endpoint, prefix, alive_addresses)
        result.expect(named is not None, f"round {round_}: no candidate took the TSO over")
        failovers.append(time.monotonic() - t0)
        # appends go on with timestamps of the new leader
        await keep_all_flowing(result, traffic, home, f"round {round_}, after", 60)
        await leader.start()
        result.rounds += 1
    await env.check(result, traffic)
    result.figures["new TSO leader after the kill, max (s)"] = round(max(failovers, default=0.0), 2)
    return result
