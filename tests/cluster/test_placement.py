"""The balancer's plan, from views built by hand: who gets what, and how much moves."""

from __future__ import annotations

from streamwal.cluster.placement import plan_round
from streamwal.cluster.records import (
    Assignment,
    ChannelStatus,
    Drain,
    MoveReason,
    MoveRequest,
    NodeRecord,
)
from streamwal.cluster.view import ClusterView


def _view(nodes: list[int], owners: dict[str, int | None], *, serving: bool = True) -> ClusterView:
    view = ClusterView(revision=10)
    view.nodes = {n: NodeRecord(n, f"h:{n}", "0", 1) for n in nodes}
    for rev, (channel, node) in enumerate(sorted(owners.items()), 1):
        view.channels.add(channel)
        if node is None:
            continue
        view.assignments[channel] = Assignment(channel, node, 1, MoveReason.INITIAL, 0)
        view.assignment_revisions[channel] = rev
        if serving:
            view.statuses[channel] = ChannelStatus(channel, node, "serving", "", 0, rev)
    return view


def _plan(
    view: ClusterView,
    *,
    now: int = 10_000,
    absent: dict[int, int] | None = None,
    grace: int = 1000,
    moves: int = 1,
) -> list[tuple[str, int | None, str]]:
    decisions = plan_round(
        view, now_ms=now, absent_since_ms=absent or {}, grace_ms=grace, max_moves=moves
    )
    return [(d.channel, d.node, d.reason) for d in decisions]


def test_new_channels_spread_evenly_over_live_nodes() -> None:
    plan = _plan(_view([1, 2, 3], {f"c{i}": None for i in range(7)}))
    counts = {n: sum(1 for _, node, _ in plan if node == n) for n in (1, 2, 3)}
    assert sorted(counts.values()) == [2, 2, 3]
    assert {reason for *_, reason in plan} == {MoveReason.INITIAL}


def test_a_lost_node_keeps_its_channels_until_the_grace_period_ends() -> None:
    view = _view([1, 2], {"a": 1, "b": 2, "c": 3, "d": 3})
    assert _plan(view, now=10_000, absent={3: 9_500}) == []
    plan = _plan(view, now=10_000, absent={3: 9_000})
    assert sorted(plan) == [("c", 1, MoveReason.NODE_LOST), ("d", 2, MoveReason.NODE_LOST)]


def test_a_joining_node_gets_channels_in_bounded_steps_once_moves_settled() -> None:
    owners: dict[str, int | None] = {f"c{i}": (1 if i < 3 else 2) for i in range(6)}
    view = _view([1, 2, 3], owners)
    plan = _plan(view, moves=1)
    assert len(plan) == 1 and plan[0][1] == 3 and plan[0][2] == MoveReason.NODE_JOINED
    assert len(_plan(view, moves=2)) == 2
    # a move still opening: no further step
    assert _plan(_view([1, 2, 3], owners, serving=False), moves=2) == []


def test_balanced_counts_move_nothing() -> None:
    assert _plan(_view([1, 2], {"a": 1, "b": 2, "c": 1})) == []


def test_a_draining_node_is_emptied_at_once_and_gets_nothing() -> None:
    view = _view([1, 2, 3], {"a": 1, "b": 1, "c": 2})
    view.drains[1] = Drain(1, 1)
    plan = _plan(view)
    assert sorted(plan) == [("a", 3, MoveReason.DRAIN), ("b", 2, MoveReason.DRAIN)]
    # a drain asked of an earlier start of the node does not apply
    view.drains[1] = Drain(1, 0)
    assert MoveReason.DRAIN not in {reason for *_, reason in _plan(view)}


def test_a_channel_removed_from_the_set_loses_its_assignment() -> None:
    view = _view([1], {"a": 1})
    view.channels.clear()
    assert _plan(view) == [("a", None, MoveReason.OPERATOR)]


def test_a_node_that_is_not_ready_is_given_no_channel() -> None:
    view = _view([1, 2], {"a": None, "b": None, "c": 1, "d": 1})
    view.nodes[2] = NodeRecord(2, "h:2", "0", 1, ready=False, not_ready="broker: refused")
    plan = _plan(view)
    assert [node for _, node, _ in plan] == [1, 1]  # no node-joined step onto node 2 either


def test_a_node_that_lost_its_broker_loses_its_channels_after_the_grace_period() -> None:
    view = _view([1, 2, 3], {"a": 1, "b": 2, "c": 2})
    view.nodes[2] = NodeRecord(2, "h:2", "0", 1, ready=False, not_ready="broker: lost for 15s")

    def plan(unready_since: int) -> list[tuple[str, int | None, str, str]]:
        decisions = plan_round(
            view,
            now_ms=10_000,
            absent_since_ms={},
            unready_since_ms={2: unready_since},
            grace_ms=1000,
            max_moves=1,
        )
        return [(d.channel, d.node, d.reason, d.detail) for d in decisions]

    assert plan(9_500) == []  # not ready for less than the grace period: it stays
    moved = plan(9_000)
    assert sorted((c, r) for c, _, r, _ in moved) == [
        ("b", MoveReason.NODE_NOT_READY),
        ("c", MoveReason.NODE_NOT_READY),
    ]
    assert {node for _, node, _, _ in moved} == {1, 3}  # spread over the ready nodes
    assert {detail for *_, detail in moved} == {"broker: lost for 15s"}
    # within the grace period, a failing open still moves the channel as on a ready node
    view.statuses["b"] = ChannelStatus("b", 2, "failed", "UnavailableError: x", 5_000, 2, 5_000, 4)
    healed = plan_round(
        view,
        now_ms=10_000,
        absent_since_ms={},
        unready_since_ms={2: 9_500},
        grace_ms=1000,
        max_moves=1,
        heal_after_ms=lambda _c: 3000,
    )
    assert [(d.channel, d.reason) for d in healed] == [("b", MoveReason.OPEN_FAILED)]
    # nowhere to go (no other node is ready): nothing moves
    for n in (1, 3):
        view.nodes[n] = NodeRecord(n, f"h:{n}", "0", 1, ready=False, not_ready="broker: x")
    assert plan(0) == []


def _failing_view(state: str, *, since: int | None, at: int) -> ClusterView:
    view = _view([1, 2], {"a": 1, "b": 2})
    failures = 0 if since is None else 3
    view.statuses["a"] = ChannelStatus("a", 1, state, "UnavailableError: x", at, 1, since, failures)
    return view


def _heal(view: ClusterView, now: int, bound: int = 3000) -> list[tuple[str, int | None, str]]:
    decisions = plan_round(
        view,
        now_ms=now,
        absent_since_ms={},
        grace_ms=1000,
        max_moves=1,
        heal_after_ms=lambda _c: bound,
    )
    return [(d.channel, d.node, d.reason) for d in decisions]


def test_a_channel_whose_opens_keep_failing_moves_after_the_bound_to_another_node() -> None:
    view = _failing_view("failed", since=10_000, at=12_000)
    assert _heal(view, now=12_999) == []
    assert _heal(view, now=13_000) == [("a", 2, MoveReason.OPEN_FAILED)]
    # an open that never answers counts from its start
    stuck = _failing_view("opening", since=None, at=10_000)
    assert _heal(stuck, now=12_000) == []
    assert _heal(stuck, now=13_500) == [("a", 2, MoveReason.OPEN_FAILED)]
    # nowhere else to go: it stays
    alone = _failing_view("failed", since=10_000, at=12_000)
    del alone.nodes[2], alone.assignments["b"], alone.statuses["b"]
    alone.channels.discard("b")
    assert _heal(alone, now=20_000) == []


def _request(view: ClusterView, channel: str, node: int, state: str = "pending") -> None:
    view.requests[channel] = (MoveRequest(channel, node, "r1", 0, state), 7)


def test_a_requested_move_goes_where_asked_whatever_the_counts() -> None:
    view = _view([1, 2], {"a": 1, "b": 2})
    _request(view, "a", 2)
    decisions = plan_round(view, now_ms=10_000, absent_since_ms={}, grace_ms=1000, max_moves=1)
    assert [(d.channel, d.node, d.reason, d.previous) for d in decisions] == [
        ("a", 2, MoveReason.REQUESTED, 1)
    ]
    assert decisions[0].request == view.requests["a"]


def test_a_requested_move_to_a_drained_node_is_not_placed() -> None:
    view = _view([1, 2], {"a": 1, "b": 2})
    view.drains[2] = Drain(2, 1)
    _request(view, "a", 2)
    assert ("a", 2, MoveReason.REQUESTED) not in _plan(view)


def test_rebalancing_leaves_a_requested_placement_where_it_is() -> None:
    # a was moved onto 2 by an operator: 2 holds 3, 1 holds 1; without the pin the
    # joining step would move one of 2's channels back, and a is the one it picks
    view = _view([1, 2], {"a": 2, "b": 2, "c": 2, "d": 1})
    assert _plan(view) == [("c", 1, MoveReason.NODE_JOINED)]
    _request(view, "c", 2, state="done")
    _request(view, "b", 2, state="done")
    assert _plan(view) == [("a", 1, MoveReason.NODE_JOINED)]
    _request(view, "a", 2, state="done")
    assert _plan(view) == []


def test_a_pin_ends_once_the_channel_moved_for_another_reason() -> None:
    view = _view([1, 2], {"a": 1, "b": 1, "c": 1, "d": 2})
    _request(view, "c", 2, state="done")  # c was pinned on 2, then moved (drain): no pin
    assert view.pinned() == set()
    assert _plan(view) == [("c", 2, MoveReason.NODE_JOINED)]
