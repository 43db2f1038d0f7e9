"""etcd stopped and restarted under the TSO while nodes append.

A private etcd (the shared one is never stopped) holds the TSO of node 1, which
serves node 2. Each round kills etcd for longer than the TSO lease: the leader must
step down (its lease cannot be kept alive), appends stall once the allocators' cached
timestamps run out, and after etcd returns the oracle must be elected again and start
above the window it saved, so appends resume with time ticks above every earlier one.
"""

from __future__ import annotations

import asyncio
import time

from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import (
    channel_per_node,
    keep_all_flowing,
    tso_group,
)

__all__ = ["run"]

_DOWN_S = 4.5  # longer than the 3 s lease


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("etcd-restart")
    etcd = await env.private_etcd()
    nodes = await tso_group(env, 2, etcd_endpoint=etcd.endpoint, batch_size=20)
    home, traffic = await channel_per_node(env, result, nodes, "etcd")
    recoveries = []
    for round_ in range(rounds):
        await keep_all_flowing(result, traffic, home, f"round {round_}, before")
        await etcd.kill()
        result.faults += 1
        await asyncio.sleep(_DOWN_S)
        await etcd.start()
        t0 = time.monotonic()
        await keep_all_flowing(result, traffic, home, f"round {round_}, after", 60)
        recoveries.append(time.monotonic() - t0)
        result.rounds += 1
    await env.check(result, traffic)
    log = nodes[0].log_text()
    result.expect(
        "TSO stopped serving" in log, "the TSO leader never stepped down while etcd was away"
    )
    result.figures["appends resumed after etcd, max (s)"] = round(max(recoveries, default=0), 2)
    result.figures["TSO step-downs"] = log.count("TSO stopped serving")
    stall = max(t.longest_stall for t in traffic)
    result.figures["longest append stall (s)"] = round(stall, 2)
    result.expect(stall >= 1.0, f"appends never stalled ({stall:.2f}s): etcd's outage did not bite")
    return result
