"""The WAL's metrics, on the OpenTelemetry API (the node wires an SDK and /metrics).

Instruments are created once at import on the global meter provider's proxy, so they
start reporting as soon as a node installs a real provider. Recording never raises.
Every instrument carries the ``channel`` attribute. A single append's latency is the
exception: a histogram kept in plain counts here, which the node's exposition reads
(:func:`append_durations`; why beside it).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Histogram, Observation

__all__ = [
    "APPEND_DURATION_BOUNDS",
    "append_durations",
    "record_append",
    "record_append_batch",
    "record_delivered",
    "record_evictions",
    "record_fenced",
    "record_first_time_tick_attempt",
    "record_open",
    "record_scanner_lag",
]

_meter = metrics.get_meter(__name__)

#: seconds, from sub-millisecond appends to multi-second opens and lags
_SECONDS_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip

# Appends are counted in plain ints and reported when metrics are collected: through
# the SDK each Counter.add hashes attributes, takes a lock and looks the aggregation
# up, a cost of the same order as the WAL's own work per append
# (docs/performance.md, "What the design choices save"). Write-ahead buffer evictions
# likewise: a full buffer evicts about one entry per append.
_append_counts: dict[tuple[str, str], int] = {}
_channel_attrs: dict[str, dict[str, str]] = {}

#: the upper bounds (seconds) of ``streamwal.wal.append.duration``'s buckets
APPEND_DURATION_BOUNDS = _SECONDS_BUCKETS
# The latency of a single append, as a histogram kept here: per channel, the count of
# each bucket (``bisect_left`` over the bounds, as the SDK places a value; the last is
# +Inf), then the sum of the durations. Not an SDK histogram: its ``record`` costs a
# unary append 6-17 us (attributes hashed, a lock, the exemplar filter) where a bucket
# here costs 0.2 us, and the OpenTelemetry API can neither hand the SDK counts
# aggregated elsewhere nor observe a histogram. Sampling a share of the appends would
# cut that cost too, but a histogram's count would then no longer be the appends it
# saw. Every sample is kept, so the histogram means what it meant: one per append; the
# node's exposition serves it (:func:`append_durations`), under the name the SDK gave.
_append_durations: dict[str, list[float]] = {}


def _observe_appends(_options: CallbackOptions) -> Iterable[Observation]:
    counts = list(_append_counts.items())  # one C-level copy: safe beside the loop thread
    return [Observation(n, {"channel": c, "outcome": o}) for (c, o), n in counts]


def _per_channel_counter(name: str, unit: str, description: str) -> dict[str, int]:
    """A cumulative counter kept as plain ints by channel, reported at collection."""
    counts: dict[str, int] = {}

    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, {"channel": c}) for c, n in list(counts.items())]

    _meter.create_observable_counter(name, callbacks=[observe], unit=unit, description=description)
    return counts


def _seconds_histogram(name: str, description: str) -> Histogram:
    """A latency or age histogram: in seconds, on the buckets every WAL duration shares."""
    return _meter.create_histogram(
        name,
        unit="s",
        description=description,
        explicit_bucket_boundaries_advisory=_SECONDS_BUCKETS,
    )


_meter.create_observable_counter(
    "streamwal.wal.appends",
    callbacks=[_observe_appends],
    unit="{message}",
    description="Appends, by channel and outcome",
)
_append_byte_counts = _per_channel_counter(
    "streamwal.wal.append.bytes", "By", "Payload bytes appended"
)
_eviction_counts = _per_channel_counter(
    "streamwal.wal.buffer.evictions", "{entry}", "Entries evicted"
)
# one sample per batch: its messages are answered together, so N samples of one value
# would say nothing more and cost a batch one SDK record per message
_append_batch_duration = _seconds_histogram(
    "streamwal.wal.append_batch.duration",
    "Latency of one batch append (append_many), every message of it landed",
)
_fenced = _meter.create_counter(
    "streamwal.wal.fenced", unit="{event}", description="Times an owner was fenced"
)
_ftt_attempts = _meter.create_counter(
    "streamwal.wal.first_time_tick.attempts",
    unit="{attempt}",
    description="First-time-tick attempts, by outcome",
)
_open_duration = _seconds_histogram(
    "streamwal.wal.open.duration",
    "Opening a channel for writing: fence to first time tick persisted",
)
# One lag sample per delivery (a message, or a batch: its oldest message, as Kafka's
# records-lag-max), not per message: a histogram sample costs a batched reader more
# than the rest of its work per message. The messages are counted in plain ints.
_scanner_lag = _seconds_histogram(
    "streamwal.wal.scanner.lag",
    (
        "How old the oldest message of a delivery (one message, or a batch) is when a "
        "scanner delivers it (wall clock - time tick); one sample per delivery"
    ),
)
_delivered_counts = _per_channel_counter(
    "streamwal.wal.scanner.delivered", "{message}", "Messages delivered by scanners"
)

_backlog_messages = _meter.create_gauge(
    "streamwal.wal.consumer.backlog.messages",
    description="Messages the log holds after a registered consumer's checkpoint",
)
_backlog_bytes = _meter.create_gauge(
    "streamwal.wal.consumer.backlog.bytes",
    unit="By",
    description="Bytes the log holds after a registered consumer's checkpoint",
)
_time_tick_lag = _meter.create_gauge(
    "streamwal.wal.consumer.time_tick_lag",
    unit="s",
    description="The channel's latest time tick minus a consumer's checkpoint time tick",
)
_truncations = _meter.create_counter(
    "streamwal.wal.truncations", description="Truncation points moved forward"
)

_LOGICAL_BITS = 18  # hybrid timestamps: physical milliseconds << 18 | logical


def _attrs(channel: str) -> dict[str, str]:
    """The channel's attribute set, made once: the SDK hashes what it is given."""
    attrs = _channel_attrs.get(channel)
    if attrs is None:
        attrs = _channel_attrs[channel] = {"channel": channel}
    return attrs


def record_append(channel: str, size: int, seconds: float, outcome: str) -> None:
    key = (channel, outcome)
    _append_counts[key] = _append_counts.get(key, 0) + 1
    if outcome == "ok":
        _append_byte_counts[channel] = _append_byte_counts.get(channel, 0) + size
        histogram = _append_durations.get(channel)
        if histogram is None:
            histogram = _append_durations[channel] = [0.0] * (len(APPEND_DURATION_BOUNDS) + 2)
        histogram[bisect_left(APPEND_DURATION_BOUNDS, seconds)] += 1
        histogram[-1] += seconds


def append_durations() -> Iterator[tuple[str, list[int], float]]:
    """Every channel's single-append latency so far: its channel, the count of each
    bucket (bounded by :data:`APPEND_DURATION_BOUNDS`, then +Inf; not cumulative) and
    the sum of the durations in seconds. Safe beside the appending thread: each
    channel's figures are copied in one step (a copy taken between an append's bucket
    and its sum lacks that duration in the sum only)."""
    for channel, histogram in list(_append_durations.items()):
        copy = list(histogram)  # one C-level copy
        yield channel, [int(n) for n in copy[:-1]], copy[-1]


def record_append_batch(
    channel: str, landed: int, landed_bytes: int, failed: Mapping[str, int], seconds: float
) -> None:
    """A batch's messages counted (as :func:`record_append` counts them, by outcome:
    ``landed`` ok with ``landed_bytes`` of payload, ``failed`` by outcome) in one update,
    and one latency sample for the batch when all of it landed."""
    if landed:
        key = (channel, "ok")
        _append_counts[key] = _append_counts.get(key, 0) + landed
        _append_byte_counts[channel] = _append_byte_counts.get(channel, 0) + landed_bytes
    for outcome, count in failed.items():
        key = (channel, outcome)
        _append_counts[key] = _append_counts.get(key, 0) + count
    if not failed:
        _append_batch_duration.record(seconds, _attrs(channel))


def record_evictions(channel: str, count: int) -> None:
    _eviction_counts[channel] = _eviction_counts.get(channel, 0) + count


def record_fenced(channel: str) -> None:
    _fenced.add(1, {"channel": channel})


def record_first_time_tick_attempt(channel: str, outcome: str) -> None:
    _ftt_attempts.add(1, {"channel": channel, "outcome": outcome})


def record_open(channel: str, seconds: float, outcome: str) -> None:
    _open_duration.record(seconds, {"channel": channel, "outcome": outcome})


def record_scanner_lag(channel: str, time_tick: int) -> None:
    """A delivery whose oldest message has ``time_tick``: one lag sample, one message
    counted; :func:`record_delivered` counts the rest of a batch."""
    lag = max(0.0, time.time() - (time_tick >> _LOGICAL_BITS) / 1000)
    _scanner_lag.record(lag, _attrs(channel))
    _delivered_counts[channel] = _delivered_counts.get(channel, 0) + 1


def record_delivered(channel: str, count: int) -> None:
    """Messages delivered along with one that :func:`record_scanner_lag` sampled."""
    _delivered_counts[channel] = _delivered_counts.get(channel, 0) + count


def record_consumer_lag(
    channel: str,
    consumer: str,
    messages: int | None,
    size: int | None,
    time_tick_lag_ms: int,
) -> None:
    """One registered consumer's backlog, and how far its checkpoint is behind."""
    attrs = {"channel": channel, "consumer": consumer}
    if messages is not None:
        _backlog_messages.set(messages, attrs)
    if size is not None:
        _backlog_bytes.set(size, attrs)
    _time_tick_lag.set(time_tick_lag_ms / 1000, attrs)


def record_truncation(channel: str) -> None:
    _truncations.add(1, {"channel": channel})
