"""Metrics of idempotent appends and transactions (OpenTelemetry API; never raise).

Kept apart from :mod:`streamwal.wal.metrics` so the exactly-once instruments read in one
place: duplicates answered, and transactions begun, in flight, committed, rolled back
and expired. Every instrument carries the ``channel`` attribute.
"""

from __future__ import annotations

from opentelemetry import metrics

__all__ = ["record_duplicate", "record_txn_begin", "record_txn_end"]

_meter = metrics.get_meter(__name__)
_duplicates = _meter.create_counter(
    "streamwal.wal.idempotence.duplicates",
    unit="{message}",
    description="Idempotent appends answered with an earlier result, nothing appended",
)
_txn_in_flight = _meter.create_up_down_counter(
    "streamwal.wal.txn.in_flight", unit="{txn}", description="Transactions open"
)
_txn_ended = _meter.create_counter(
    "streamwal.wal.txn.ended",
    unit="{txn}",
    description="Transactions ended, by outcome (committed, rolled_back, expired, aborted)",
)


def record_duplicate(channel: str) -> None:
    _duplicates.add(1, {"channel": channel})


def record_txn_begin(channel: str) -> None:
    _txn_in_flight.add(1, {"channel": channel})


def record_txn_end(channel: str, outcome: str) -> None:
    _txn_in_flight.add(-1, {"channel": channel})
    _txn_ended.add(1, {"channel": channel, "outcome": outcome})
