"""``streamwal_wal_append_duration_seconds`` on ``/metrics``, from the WAL's own counts.

The WAL keeps a single append's latency as plain bucket counts rather than through the
SDK (:func:`streamwal.wal.metrics.append_durations` says why), so the SDK's Prometheus
reader never sees it. This collector, registered beside that reader, serves it as the
reader served the SDK histogram: the same family name, unit, ``channel`` label and
``le`` bounds, cumulative buckets, so scrapes, dashboards and alerts read it unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate
from typing import Any

from streamwal.wal.metrics import APPEND_DURATION_BOUNDS, append_durations

__all__ = ["AppendDurationCollector", "register_append_durations"]

_NAME = "streamwal_wal_append_duration"
_DESCRIPTION = "Latency of one append"
#: ``le`` as the SDK's reader writes it (``f"{bound}"``), then +Inf
_LE = [f"{bound}" for bound in APPEND_DURATION_BOUNDS] + ["+Inf"]

_registered: list[Any] = []


class AppendDurationCollector:
    """A ``prometheus_client`` collector of the WAL's single-append latency."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily(_NAME, _DESCRIPTION, labels=["channel"], unit="seconds")
        for channel, counts, total in append_durations():
            family.add_metric(
                [channel], list(zip(_LE, accumulate(counts), strict=True)), sum_value=total
            )
        if family.samples:  # as the SDK's reader: no family before the first append
            yield family

    def describe(self) -> list[Any]:
        return []  # described by collecting: registration must not run a collection


def register_append_durations(registry: Any) -> None:
    """Serve the histogram from ``registry`` (the one ``/metrics`` reads); once per
    process, however many nodes set telemetry up in it."""
    if registry in _registered:
        return
    registry.register(AppendDurationCollector())
    _registered.append(registry)
