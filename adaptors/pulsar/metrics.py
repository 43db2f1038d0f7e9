"""What the Pulsar backend's segment receipts could not place from their edges alone.

Rare by design (:mod:`.segments`): a segment is read back when the producer closed more
than one batch while it was being sent, and left unplaced (its middle answered with an
unknown position) when the log did not hold it as sent. A read-back that starts over on
a fresh reader (its reader failed or hung, as one may while the topic moves) counts
once more as ``read_again`` for each new attempt. The fence watch reads what a fenced
writer wrote through the same attempts; its new attempts count as
``read_again_after_fence``, apart, as they place no segment. Kept as plain ints and
reported at collection, like the WAL's own counters; the benchmark reads them directly.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

__all__ = [
    "READ_AGAIN",
    "READ_AGAIN_AFTER_FENCE",
    "READ_BACK",
    "UNPLACED",
    "record_segment",
    "segment_count",
]

READ_BACK = "read_back"
READ_AGAIN = "read_again"
READ_AGAIN_AFTER_FENCE = "read_again_after_fence"
UNPLACED = "unplaced"

_meter = metrics.get_meter(__name__)
_segment_counts: dict[tuple[str, str], int] = {}


def _observe(_options: CallbackOptions) -> Iterable[Observation]:
    counts = list(_segment_counts.items())  # one C-level copy: safe beside the loop thread
    return [Observation(n, {"channel": c, "outcome": o}) for (c, o), n in counts]


_meter.create_observable_counter(
    "streamwal.pulsar.segments.unplaced_by_receipts",
    callbacks=[_observe],
    unit="{segment}",
    description=(
        "Segments whose edge receipts did not place every message, by outcome "
        "(read_again: each read-back attempt after the first; read_again_after_fence: "
        "each attempt after the first of the fence watch's read of a fenced writer's log)"
    ),
)


def record_segment(channel: str, outcome: str) -> None:
    key = (channel, outcome)
    _segment_counts[key] = _segment_counts.get(key, 0) + 1


def segment_count(channel: str, outcome: str) -> int:
    return _segment_counts.get((channel, outcome), 0)
