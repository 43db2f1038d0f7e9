"""``/metrics`` leaves out the series of a channel this process gave up, and shows
them again once the channel is opened here again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from streamwal.node import metric_scope


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[CollectorRegistry]:
    monkeypatch.setattr(metric_scope, "_holders", {})
    monkeypatch.setattr(metric_scope, "_hidden", frozenset())
    registry = CollectorRegistry()
    appends = Counter("streamwal_wal_appends", "appends", ["channel"], registry=registry)
    appends.labels("kept").inc()
    appends.labels("gone").inc(2)
    other = Counter("streamwal_wal_opens", "opens", ["channel"], registry=registry)
    other.labels("gone").inc()
    gap = Counter("streamwal_client_write_gap", "a client's", ["channel"], registry=registry)
    gap.labels("gone").inc()
    yield registry


def test_a_given_up_channel_leaves_the_exposition_and_comes_back_when_opened(
    registry: CollectorRegistry,
) -> None:
    scoped = metric_scope.ScopedRegistry(registry)
    metric_scope.opened("gone")
    assert 'channel="gone"' in generate_latest(scoped).decode()
    metric_scope.given_up("gone")
    text = generate_latest(scoped).decode()
    assert 'streamwal_wal_appends_total{channel="kept"} 1.0' in text
    assert 'streamwal_wal_appends_total{channel="gone"}' not in text
    assert "streamwal_wal_opens" not in text  # a family with no series left
    # a client's view of the channel is not an owner's: it stays
    assert 'streamwal_client_write_gap_total{channel="gone"} 1.0' in text
    metric_scope.opened("gone")
    assert 'streamwal_wal_appends_total{channel="gone"} 2.0' in generate_latest(scoped).decode()


def test_a_channel_held_by_another_node_of_the_process_stays_shown(
    registry: CollectorRegistry,
) -> None:
    scoped = metric_scope.ScopedRegistry(registry)
    metric_scope.opened("gone")  # one node of this process holds it
    metric_scope.opened("gone")  # a second one took it over
    metric_scope.given_up("gone")  # the first one let go after that
    assert 'streamwal_wal_appends_total{channel="gone"} 2.0' in generate_latest(scoped).decode()
    metric_scope.given_up("gone")
    assert 'streamwal_wal_appends_total{channel="gone"}' not in generate_latest(scoped).decode()
