"""Batch appends through faults: every message's own outcome is the truth.

Three nodes (node 1 runs the oracle and never owns the channel). Two clients send
``ProduceBatch`` calls of 1 to 48 messages, and a third appends one message at a time
to the same channel, all through fault proxies. Each round, one fault: the proxies
cut every client connection at once (batches in flight get an ambiguous failure), or
the channel is taken over by the other node (a batch in flight is fenced part way),
or its owner is killed with SIGKILL and the other node takes over. Nothing is
retried. The checker then holds every message to what its own result said: each
acknowledged message is in the log once, at its position and time tick; none answered
"not written" is there; and the messages of one batch that landed sit next to each
other in the batch's order (``batch-split``), the single appends never between them.
"""

from __future__ import annotations

import contextlib

from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import RotatingFaults

__all__ = ["BATCH_SIZES", "run"]

BATCH_SIZES = (1, 48)


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("batch-appends")
    async with contextlib.AsyncExitStack() as stack:
        faults = await RotatingFaults.behind_proxies(stack, env, result, "batches")
        channel = faults.channel
        batches = env.traffic(channel, faults.via, workers=2, batch=BATCH_SIZES)
        singles = env.traffic(channel, faults.via, workers=1)
        for t in (batches, singles):
            t.prefer(faults.via[0])
            await t.start()
        await faults.run_rounds(env.rng, rounds, batches, [batches, singles])
        await env.check(result, [batches, singles])
    sizes = [len(b) for b in batches.batches]
    result.figures.update(
        {
            "faults": faults.done,
            "batches sent": len(sizes),
            "messages in batches": sum(sizes),
            "single appends acknowledged": len(singles.acks),
        }
    )
    result.expect(len(sizes) > rounds, f"only {len(sizes)} batches were sent")
    return result
