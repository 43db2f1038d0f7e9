"""The WAL's single-append latency, kept in plain counts, is served as the SDK's
Prometheus reader served its histogram: same family, buckets, count and sum."""

from __future__ import annotations

import re
import uuid

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest

from streamwal.node.append_histogram import register_append_durations
from streamwal.wal.metrics import APPEND_DURATION_BOUNDS, record_append

# on both sides of bounds, on a bound itself (it belongs to the bucket it bounds), past
# the last bound
_DURATIONS = (0.0001, 0.0005, 0.0007, 0.003, 0.003, 0.04, 0.9, 1.0, 2.0, 31.0)


def _sdk_point(durations: tuple[float, ...]) -> HistogramDataPoint:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("reference")
    histogram = meter.create_histogram(
        "streamwal.wal.append.duration",
        unit="s",
        explicit_bucket_boundaries_advisory=APPEND_DURATION_BOUNDS,
    )
    for seconds in durations:
        histogram.record(seconds, {"channel": "c"})
    data = reader.get_metrics_data()
    assert data is not None
    point = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points[0]
    assert isinstance(point, HistogramDataPoint)
    return point


def _samples(text: str, channel: str) -> dict[str, float]:
    found = {}
    for line in text.splitlines():
        if f'channel="{channel}"' in line:
            key, _, value = line.rpartition(" ")
            found[key.replace(f'channel="{channel}"', 'channel="c"')] = float(value)
    return found


def test_served_as_the_sdk_served_it() -> None:
    channel = f"hist-{uuid.uuid4().hex}"
    registry = CollectorRegistry()
    register_append_durations(registry)
    register_append_durations(registry)  # a second node's set-up in the process: no twin
    assert channel not in generate_latest(registry).decode()

    for seconds in _DURATIONS:
        record_append(channel, 100, seconds, "ok")
    record_append(channel, 100, 0.002, "fenced")  # a failed append has no latency
    text = generate_latest(registry).decode()
    assert text.count("# TYPE streamwal_wal_append_duration_seconds histogram") == 1
    served = _samples(text, channel)

    point = _sdk_point(_DURATIONS)
    cumulative = 0
    for bound, count in zip([*APPEND_DURATION_BOUNDS, "+Inf"], point.bucket_counts, strict=True):
        cumulative += count
        key = f'streamwal_wal_append_duration_seconds_bucket{{channel="c",le="{bound}"}}'
        assert served[key] == cumulative, key
    assert served['streamwal_wal_append_duration_seconds_count{channel="c"}'] == point.count
    assert served['streamwal_wal_append_duration_seconds_count{channel="c"}'] == len(_DURATIONS)
    assert abs(served['streamwal_wal_append_duration_seconds_sum{channel="c"}'] - point.sum) < 1e-9
    # the bucket bounds print as the SDK's reader prints them (le="1.0", not "1")
    assert re.search(r'le="1\.0"\} 8\.0', text)
