"""``/metrics`` leaves out the gauges of a channel this process gave up at once, its
counters and histograms after the retention, and shows them again once the channel
is opened here again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from streamwal.node import metric_scope


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[CollectorRegistry]:
    monkeypatch.setattr(metric_scope, "_holders", {})
    monkeypatch.setattr(metric_scope, "_given_up", {})
    registry = CollectorRegistry()
    appends = Counter("streamwal_wal_appends", "appends", ["channel"], registry=registry)
    appends.labels("kept").inc()
    appends.labels("gone").inc(2)
    size = Gauge("streamwal_wal_buffer_size", "bytes", ["channel"], registry=registry)
    size.labels("kept").set(10)
    size.labels("gone").set(20)
    backlog = Gauge("streamwal_wal_backlog", "backlog", ["channel"], registry=registry)
    backlog.labels("gone").set(3)
    gap = Counter("streamwal_client_write_gap", "a client's", ["channel"], registry=registry)
    gap.labels("gone").inc()
    yield registry


def _later(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Every given-up channel given up ``seconds`` earlier than recorded."""
    moved = {c: at - seconds for c, at in metric_scope._given_up.items()}
    monkeypatch.setattr(metric_scope, "_given_up", moved)


def test_a_given_up_channels_gauges_go_at_once_and_its_counters_after_the_retention(
    registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    scoped = metric_scope.ScopedRegistry(registry)
    metric_scope.opened("gone")
    assert 'streamwal_wal_buffer_size{channel="gone"}' in generate_latest(scoped).decode()
    metric_scope.given_up("gone")
    text = generate_latest(scoped).decode()
    assert 'streamwal_wal_buffer_size{channel="kept"} 10.0' in text
    assert 'streamwal_wal_buffer_size{channel="gone"}' not in text
    assert "streamwal_wal_backlog" not in text  # a family with no series left
    # the last increments stay readable for a while: a scrape sees the fence
    assert 'streamwal_wal_appends_total{channel="gone"} 2.0' in text
    _later(monkeypatch, metric_scope.COUNTER_RETENTION_S)
    text = generate_latest(scoped).decode()
    assert 'streamwal_wal_appends_total{channel="gone"}' not in text
    assert 'streamwal_wal_appends_total{channel="kept"} 1.0' in text
    # a client's view of the channel is not an owner's: it stays
    assert 'streamwal_client_write_gap_total{channel="gone"} 1.0' in text
    metric_scope.opened("gone")
    text = generate_latest(scoped).decode()
    assert 'streamwal_wal_appends_total{channel="gone"} 2.0' in text
    assert 'streamwal_wal_buffer_size{channel="gone"} 20.0' in text


def test_a_channel_held_by_another_node_of_the_process_stays_shown(
    registry: CollectorRegistry,
) -> None:
    scoped = metric_scope.ScopedRegistry(registry)
    metric_scope.opened("gone")  # one node of this process holds it
    metric_scope.opened("gone")  # a second one took it over
    metric_scope.given_up("gone")  # the first one let go after that
    assert 'streamwal_wal_buffer_size{channel="gone"} 20.0' in generate_latest(scoped).decode()
    metric_scope.given_up("gone")
    assert 'streamwal_wal_buffer_size{channel="gone"}' not in generate_latest(scoped).decode()
