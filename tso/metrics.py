"""The TSO's OpenTelemetry instruments (API only; the process installs an SDK if it wants).

Recording never raises into a caller: a broken exporter must not fail an allocation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from opentelemetry import metrics

__all__ = ["record_clock_went_back", "record_fetch_latency", "record_step_down"]

_log = logging.getLogger(__name__)
_meter = metrics.get_meter(__name__)

_fetch_latency = _meter.create_histogram(
    "streamwal.tso.allocation.fetch.duration",
    unit="s",
    description="Time an allocate() spent fetching a fresh timestamp range from its source",
    explicit_bucket_boundaries_advisory=(
        0.0001,
        0.00025,
        0.0005,
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        5.0,
    ),  # seconds
)
_clock_went_back = _meter.create_counter(
    "streamwal.tso.clock.went_back",
    unit="{event}",
    description="Times the oracle saw the wall clock read earlier than its previous reading",
)
_step_downs = _meter.create_counter(
    "streamwal.tso.leader.step_downs",
    unit="{event}",
    description="Times this oracle stopped serving as leader",
)


def _safe(fn: object, *args: object) -> None:
    try:
        fn(*args)  # type: ignore[operator]
    except Exception:  # telemetry never fails the caller
        _log.debug("metric recording failed", exc_info=True)


def record_fetch_latency(seconds: float, attributes: Mapping[str, str]) -> None:
    _safe(_fetch_latency.record, seconds, dict(attributes))


def record_clock_went_back(attributes: Mapping[str, str]) -> None:
    _safe(_clock_went_back.add, 1, dict(attributes))


def record_step_down(reason: str) -> None:
    _safe(_step_downs.add, 1, {"reason": reason})
