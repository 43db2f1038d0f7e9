"""``cluster status --moves N``: the last N moves, and none for 0."""

from __future__ import annotations

from streamwal.cluster.operations import render_status, status_json
from streamwal.cluster.records import ClusterKeys, Move, MoveReason
from streamwal.cluster.view import ClusterView


def _view(moves: int) -> ClusterView:
    view = ClusterView()
    for i in range(moves):
        move = Move(f"c{i}", None, 1, MoveReason.INITIAL, 1, 1_000 + i)
        view.moves.append((f"m{i}", move))
    return view


def test_the_last_moves_and_none_for_zero() -> None:
    view, keys = _view(3), ClusterKeys("/p")
    assert [m["channel"] for m in status_json(view, keys, moves=2)["moves"]] == ["c1", "c2"]
    assert [m["channel"] for m in status_json(view, keys, moves=5)["moves"]] == ["c0", "c1", "c2"]
    assert status_json(view, keys, moves=0)["moves"] == []  # not all of them
    text = render_status(view, moves=0)
    assert "last moves (0 of 3 kept):" in text
    assert not any(f"c{i} " in text for i in range(3))
    assert "c2 " in render_status(view, moves=1) and "c1 " not in render_status(view, moves=1)
