"""``cluster status`` of a node whose lease renewal is overdue: suspect, with how long,
and its channels unconfirmed (its last report says serving, which may no longer hold)."""

from __future__ import annotations

import time

from streamwal.cluster.operations import NodeLiveness, render_status, status_json, suspects
from streamwal.cluster.records import (
    Assignment,
    ChannelStatus,
    ClusterKeys,
    MoveReason,
    MoveRequest,
    NodeRecord,
    RequestState,
)
from streamwal.cluster.view import ClusterView


def _view() -> ClusterView:
    view = ClusterView(revision=9)
    for node in (1, 2):
        view.nodes[node] = NodeRecord(node, f"h:{node}", "0", 1)
        view.node_leases[node] = 100 + node
        channel = f"c{node}"
        view.channels.add(channel)
        view.assignments[channel] = Assignment(channel, node, 1, MoveReason.INITIAL, 0)
        view.assignment_revisions[channel] = node
        view.statuses[channel] = ChannelStatus(channel, node, "serving", "", 0, node)
    return view


def _now() -> int:
    return time.time_ns() // 1_000_000


def test_a_renewal_overdue_past_a_third_of_the_ttl_and_the_slack_is_suspect() -> None:
    now = 100_000
    # ttl 3: renewals every 1 s, 1 s of slack
    assert suspects({1: NodeLiveness(3, 2, now - 1_900)}, now) == {}
    assert suspects({1: NodeLiveness(3, 1, now - 2_500)}, now) == {1: 0.5}


def test_status_shows_a_suspect_node_and_its_channels_unconfirmed() -> None:
    view, now = _view(), _now()
    liveness = {1: NodeLiveness(3, 2, now - 200), 2: NodeLiveness(3, 0, now - 4_000)}
    data = status_json(view, ClusterKeys("/p"), liveness=liveness)
    nodes = {n["id"]: n for n in data["nodes"]}
    assert nodes[1]["suspect"] is False and nodes[1]["renewal_overdue_s"] is None
    assert nodes[2]["suspect"] is True and 1.5 <= nodes[2]["renewal_overdue_s"] <= 2.5
    channels = {c["name"]: c for c in data["channels"]}
    assert channels["c1"]["state"] == "serving" and channels["c1"]["serving"] is True
    assert channels["c2"]["state"] == "unconfirmed" and channels["c2"]["serving"] is False
    text = render_status(view, liveness=liveness)
    node_line = next(line for line in text.splitlines() if "h:2" in line)
    assert "SUSPECT (renewal overdue" in node_line
    c2_line = next(line for line in text.splitlines() if line.strip().startswith("c2"))
    assert "unconfirmed" in c2_line and "last report serving" in c2_line
    c1_line = next(line for line in text.splitlines() if line.strip().startswith("c1"))
    assert "serving for" in c1_line and "unconfirmed" not in c1_line


def test_without_lease_readings_nothing_is_suspect() -> None:
    data = status_json(_view(), ClusterKeys("/p"))
    assert all(not n["suspect"] for n in data["nodes"])
    assert all(c["state"] == "serving" for c in data["channels"])


def test_status_shows_a_pending_move_and_a_placement_a_move_pinned() -> None:
    view = _view()
    view.requests["c1"] = (MoveRequest("c1", 2, "r1", 1_000), 20)  # pending
    view.requests["c2"] = (MoveRequest("c2", 2, "r0", 500, RequestState.DONE, "ab" * 16), 19)
    data = status_json(view, ClusterKeys("/p"))
    assert data["requested"] == [{"channel": "c1", "node": 2, "at_ms": 1_000, "request_id": "r1"}]
    channels = {c["name"]: c for c in data["channels"]}
    assert channels["c2"]["pinned"] is True and channels["c1"]["pinned"] is False
    text = render_status(view)
    assert "requested " in text and "c1 -> node 2" in text
    c2_line = next(line for line in text.splitlines() if line.strip().startswith("c2"))
    assert "(placed by cluster move)" in c2_line
    assert text.splitlines()[-1].startswith("last moves")
