"""The balancer's plan for one round, as a pure function of what it read.

Order of concerns in one round: channels removed from the set lose their assignment;
channels without an owner get one; channels of a node gone for longer than the grace
period, of a node found dead by evidence (``lost/<id>``: no grace, it cannot come
back), or of a draining node, move at once (unbounded: they take no writes until
moved). So do the channels of a live node that has not been ready for the grace period
(it lost its broker: it says so in its record). A channel whose owner has failed to
open it (or has been opening it) for longer than its bound (``heal_after_ms``: the
balancer backs it off for a channel that keeps failing) moves
to another node, so one node that cannot reach its broker does not keep a channel
unserved. Only a ready node (it reached its broker) is a target. Only when nothing
else moves and every assigned channel serves, at most
``max_moves`` channels move from the fullest node to the emptiest, so a joining node
fills in bounded steps and never triggers a storm. A target is always the node with
the fewest channels (ties: the lowest id), so counts stay within one of each other.

An operator's move (``cluster move``: a pending :class:`MoveRequest`) to a node that
can take channels is placed as asked, whatever the counts, before anything else is
planned for its channel; once done the channel is pinned there, and the rebalancing
step leaves it alone (it balances the other channels, which may leave the counts
further apart than one). A drain, a lost or not-ready owner moves a pinned channel as
any other, and the pin is over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from streamwal.cluster.records import ChannelStatus, MoveReason, MoveRequest, RequestState
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
    #: recorded with the move (an open-failed move: the owner's last error)
    detail: str = ""
    #: the operator's move this carries out (reason ``requested``), and its revision
    request: tuple[MoveRequest, int] | None = None


def plan_round(
    view: ClusterView,
    *,
    now_ms: int,
    absent_since_ms: Mapping[int, int],
    grace_ms: int,
    unready_since_ms: Mapping[int, int] | None = None,
    max_moves: int,
    heal_after_ms: Callable[[str], int] | None = None,
) -> list[Decision]:
    live = set(view.nodes)
    draining = view.draining()
    ready = view.ready_nodes()
    targets = sorted(ready - draining)
    counts = {node: 0 for node in targets}
    for assignment in view.assignments.values():
        if assignment.node in counts and assignment.channel in view.channels:
            counts[assignment.node] += 1
    decisions = [
        Decision(channel, None, MoveReason.OPERATOR, a.node)
        for channel, a in sorted(view.assignments.items())
        if channel not in view.channels
    ]

    def place(
        channel: str,
        reason: str,
        previous: int | None,
        lost_at: int | None = None,
        detail: str = "",
        request: tuple[MoveRequest, int] | None = None,
    ) -> None:
        candidates = counts
        if request is not None:  # where the operator asked
            candidates = {request[0].node: counts[request[0].node]}
        elif reason == MoveReason.OPEN_FAILED:  # anywhere but where it keeps failing
            candidates = {n: c for n, c in counts.items() if n != previous}
        if not candidates:
            return
        target = min(candidates, key=lambda n: (candidates[n], n))
        counts[target] += 1
        if previous in counts:
            counts[previous] -= 1
        decisions.append(Decision(channel, target, reason, previous, lost_at, detail, request))

    for channel in sorted(view.channels):
        current = view.assignments.get(channel)
        requested = view.requests.get(channel)
        if (
            requested is not None
            and requested[0].state == RequestState.PENDING
            and requested[0].node in counts
            and (current is None or current.node != requested[0].node)
        ):
            previous = None if current is None else current.node
            place(channel, MoveReason.REQUESTED, previous, request=requested)
        elif current is None:
            place(channel, MoveReason.INITIAL, None)
        elif current.node not in live:
            evidence = view.lost.get(current.node)
            if evidence is not None:  # dead, not late: nothing to wait for
                detail = f"{evidence.evidence} x{evidence.refusals} (seen by node {evidence.by})"
                place(
                    channel, MoveReason.NODE_LOST, current.node, evidence.first_refused_ms, detail
                )
                continue
            lost_at = absent_since_ms.get(current.node, now_ms)
            if now_ms - lost_at >= grace_ms:
                place(channel, MoveReason.NODE_LOST, current.node, lost_at)
        elif current.node in draining:
            place(channel, MoveReason.DRAIN, current.node)
        elif current.node not in ready and _unready_for(
            current.node, unready_since_ms, now_ms, grace_ms
        ):
            why = view.nodes[current.node].not_ready
            place(channel, MoveReason.NODE_NOT_READY, current.node, detail=why)
        elif heal_after_ms is not None:
            detail = _failing(view.current_status(channel), now_ms, heal_after_ms(channel))
            if detail:
                place(channel, MoveReason.OPEN_FAILED, current.node, detail=detail)
    if decisions or len(counts) < 2:
        return decisions
    if not all(view.serving(c) for c in view.channels if c in view.assignments):
        return decisions  # the last moves have not settled: no new step yet
    pinned = view.pinned()
    owned: dict[int, list[str]] = {node: [] for node in counts}
    for channel in sorted(view.channels):
        held = view.assignments.get(channel)
        if held is not None and held.node in owned and channel not in pinned:
            owned[held.node].append(channel)
    for _ in range(max_moves):
        movable = [n for n in counts if owned[n]]
        if not movable:
            break
        fullest = max(movable, key=lambda n: (counts[n], -n))
        emptiest = min(counts, key=lambda n: (counts[n], n))
        if counts[fullest] - counts[emptiest] <= 1:
            break
        channel = owned[fullest].pop()
        counts[fullest] -= 1
        counts[emptiest] += 1
        decisions.append(Decision(channel, emptiest, MoveReason.NODE_JOINED, fullest))
    return decisions


def _unready_for(
    node: int, unready_since_ms: Mapping[int, int] | None, now_ms: int, grace_ms: int
) -> bool:
    """Not ready for the grace period (before that its failing opens may still move
    its channels, as they would on a ready node)."""
    since = (unready_since_ms or {}).get(node, now_ms)
    return now_ms - since >= grace_ms


def _failing(status: ChannelStatus | None, now_ms: int, bound_ms: int) -> str:
    """Why the owner counts as unable to open the channel (``""``: it does not): its
    opens have failed for ``bound_ms``, or one open has run that long unanswered (an
    open against a broker that refuses connections retries rather than fails)."""
    if status is None or status.state == "serving":
        return ""
    if status.failing_since_ms is not None and now_ms - status.failing_since_ms >= bound_ms:
        failing_s = (now_ms - status.failing_since_ms) / 1000
        detail = f"{status.failures} failed opens in {failing_s:.1f}s"
        return detail + (f", last: {status.reason}" if status.reason else "")
    if status.state == "opening" and now_ms - status.at_ms >= bound_ms:
        detail = f"opening for {(now_ms - status.at_ms) / 1000:.1f}s without an answer"
        return detail + (f" (last error: {status.reason})" if status.reason else "")
    return ""
