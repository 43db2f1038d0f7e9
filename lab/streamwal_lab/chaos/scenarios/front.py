"""Faults behind and of the native front: its coalesced frames hold every answer true.

Three nodes with ``node.front: native`` (node 1 runs the oracle and never owns the
channel); nodes 2 and 3 own it in turn, each behind a fault proxy. Four plain and
four idempotent writers append one message at a time each, so the front puts the
calls that meet into one frame of independent appends. Each round, one fault in
turn: every client connection cut at once (answers of whole frames lost), a takeover
(a frame in flight fenced part way), SIGKILL of the owner (its front dies with it,
frames in flight and all), or SIGKILL of the owner's front alone (the node lives on,
unreachable, must notice, and is restarted once the channel has moved). Idempotent
writers retry each failed append on the next node with its numbers, plain ones
never. The checker holds every answer to the log as for any client: an answer the
front handed to the wrong caller is ``ack-changed``, one given twice
``ack-position-shared``, a frame's append called not written but landed
``not-written-persisted``, a retried one landed twice ``ack-duplicated``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable

from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import KNOWN_FAULTS, RotatingFaults

__all__ = ["run"]

#: what the front prints when it stops (gracefully: a killed one prints nothing)
_COUNTS = re.compile(rb"(\d+) Produce calls coalesced into (\d+) frames")


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("native-front")
    async with contextlib.AsyncExitStack() as stack:
        faults = await RotatingFaults.behind_proxies(
            stack, env, result, "front", faults=KNOWN_FAULTS, sections={"node": {"front": "native"}}
        )
        plain = env.traffic(faults.channel, faults.via, workers=4)
        numbered = env.traffic(faults.channel, faults.via, workers=4, idempotent=True, tag="i")
        for t in (plain, numbered):
            t.prefer(faults.via[0])
            await t.start()
        await faults.run_rounds(env.rng, rounds, plain, [plain, numbered])
        await env.check(result, [plain, numbered])
        for node in faults.movers:  # a graceful stop: each front prints its counts
            await node.terminate()
        calls, frames = _coalesced(node.log_path.read_bytes() for node in faults.movers)
    result.figures.update(
        {
            "faults": faults.done,
            "calls coalesced (fronts stopped gracefully)": calls,
            "frames they took": frames,
            "idempotent appends acknowledged after a failed try": numbered.retried,
        }
    )
    result.expect(frames > 0 and calls > frames, f"{calls} calls in {frames} frames: none shared")
    return result


def _coalesced(logs: Iterable[bytes]) -> tuple[int, int]:
    """Calls and frames the fronts that stopped gracefully say they coalesced."""
    calls = frames = 0
    for log in logs:
        for found in _COUNTS.finditer(log):
            calls, frames = calls + int(found.group(1)), frames + int(found.group(2))
    return calls, frames
