"""The balancer's plan for one round, as a pure function of what it read.

Order of concerns in one round: channels removed from the set lose their assignment;
channels without an owner get one; channels of a node gone for longer than the grace
period, or of a draining node, move at once (unbounded: they take no writes until
moved). Only when nothing else moves and every assigned channel serves, at most
``max_moves`` channels move from the fullest node to the emptiest, so a joining node
fills in bounded steps and never triggers a storm. A target is always the node with
the fewest channels (ties: the lowest id), so counts stay within one of each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streamwal.cluster.records import MoveReason
from streamwal.cluster.view import ClusterView

__all__ = ["Decision", "plan_round"]


@dataclass(frozen=True)
class Decision:
    channel: str
    #: ``None``: remove the assignment (the channel left the set)
    node: int | None
    reason: str
    previous: int | None
    lost_at_ms: int | None = None


def plan_round(
    view: ClusterView,
    *,
    now_ms: int,
    absent_since_ms: Mapping[int, int],
    grace_ms: int,
    max_moves: int,
) -> list[Decision]:
    live = set(view.nodes)
    draining = view.draining()
    targets = sorted(live - draining)
    counts = {node: 0 for node in targets}
    for assignment in view.assignments.values():
        if assignment.node in counts and assignment.channel in view.channels:
            counts[assignment.node] += 1
    decisions = [
        Decision(channel, None, MoveReason.OPERATOR, a.node)
        for channel, a in sorted(view.assignments.items())
        if channel not in view.channels
    ]

    def place(channel: str, reason: str, previous: int | None, lost_at: int | None = None) -> None:
        if not counts:
            return
        target = min(counts, key=lambda n: (counts[n], n))
        counts[target] += 1
        if previous in counts:
            counts[previous] -= 1
        decisions.append(Decision(channel, target, reason, previous, lost_at))

    for channel in sorted(view.channels):
        current = view.assignments.get(channel)
        if current is None:
            place(channel, MoveReason.INITIAL, None)
        elif current.node not in live:
            lost_at = absent_since_ms.get(current.node, now_ms)
            if now_ms - lost_at >= grace_ms:
                place(channel, MoveReason.NODE_LOST, current.node, lost_at)
        elif current.node in draining:
            place(channel, MoveReason.DRAIN, current.node)
    if decisions or len(counts) < 2:
        return decisions
    if not all(view.serving(c) for c in view.channels if c in view.assignments):
        return decisions  # the last moves have not settled: no new step yet
    owned: dict[int, list[str]] = {node: [] for node in counts}
    for channel in sorted(view.channels):
        held = view.assignments.get(channel)
        if held is not None and held.node in owned:
            owned[held.node].append(channel)
    for _ in range(max_moves):
        fullest = max(counts, key=lambda n: (counts[n], -n))
        emptiest = min(counts, key=lambda n: (counts[n], n))
        if counts[fullest] - counts[emptiest] <= 1:
            break
        channel = owned[fullest].pop()
        counts[fullest] -= 1
        counts[emptiest] += 1
        decisions.append(Decision(channel, emptiest, MoveReason.NODE_JOINED, fullest))
    return decisions
