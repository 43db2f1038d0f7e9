"""The cluster's OpenTelemetry instruments (API only; the node installs the SDK).

Recording never raises: a broken exporter must not stop a balancer or a failover.

Two views of a failover, named for what each measures:
``streamwal.cluster.reassignment.duration`` (a new owner's: from the balancer finding
the old owner's lease gone to the channel serving here; it leaves out the lease TTL
before that, which no node can see the start of) and ``streamwal.client.write_gap``
(a :class:`~streamwal.cluster.client.ClusterClient`'s: from its first failed write
to a channel to the first acknowledged one after it, the outage its caller saw).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from opentelemetry import metrics

__all__ = [
    "WriteGaps",
    "record_balancer_term",
    "record_channels_per_node",
    "record_move",
    "record_node_lost",
    "record_reassignment",
    "record_release_wait",
]

_log = logging.getLogger(__name__)
_meter = metrics.get_meter(__name__)

_moves = _meter.create_counter(
    "streamwal.cluster.moves", unit="{move}", description="Channel assignments written, by reason"
)
_GAP_BUCKETS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0)
_reassignment = _meter.create_histogram(
    "streamwal.cluster.reassignment.duration",
    unit="s",
    description=(
        "From the balancer finding a node's lease gone to its channel serving on the new "
        "owner (recorded there); the lease TTL before it is not included"
    ),
    explicit_bucket_boundaries_advisory=_GAP_BUCKETS,
)
_write_gap = _meter.create_histogram(
    "streamwal.client.write_gap",
    unit="s",
    description=(
        "A ClusterClient's gap in writes to a channel: from its first failed attempt to "
        "the first acknowledged write after it"
    ),
    explicit_bucket_boundaries_advisory=_GAP_BUCKETS,
)
_release_wait = _meter.create_histogram(
    "streamwal.cluster.release.wait",
    unit="s",
    description="How long a new owner held back its fence for the old owner's release, by outcome",
    explicit_bucket_boundaries_advisory=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0),
)
_lost = _meter.create_counter(
    "streamwal.cluster.nodes_lost",
    unit="{node}",
    description="Nodes this node declared dead before their lease ran out, by evidence",
)
_term = _meter.create_gauge(
    "streamwal.cluster.balancer.term", description="The term this node's balancer holds (0: none)"
)
_per_node = _meter.create_gauge(
    "streamwal.cluster.channels", unit="{channel}", description="Channels assigned per node"
)


def _safe(fn: Callable[..., None], *args: object) -> None:
    try:
        fn(*args)
    except Exception:  # telemetry never fails the caller
        _log.debug("metric recording failed", exc_info=True)


def record_move(reason: str) -> None:
    _safe(_moves.add, 1, {"reason": reason})


def record_node_lost(evidence: str) -> None:
    _safe(_lost.add, 1, {"evidence": evidence})


def record_reassignment(seconds: float, channel: str) -> None:
    _safe(_reassignment.record, seconds, {"channel": channel})


def record_balancer_term(term: int, node_id: int) -> None:
    _safe(_term.set, term, {"streamwal.node.id": node_id})


def record_channels_per_node(counts: Mapping[int, int]) -> None:
    for node, count in counts.items():
        _safe(_per_node.set, count, {"streamwal.node.id": node})


def record_release_wait(seconds: float, outcome: str) -> None:
    _safe(_release_wait.record, seconds, {"outcome": outcome})


class WriteGaps:
    """Per channel, since when a client's writes fail: the first acknowledged write
    after that records the gap (``streamwal.client.write_gap``)."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def failed(self, channel: str) -> None:
        self._since.setdefault(channel, time.monotonic())

    def acknowledged(self, channel: str) -> None:
        since = self._since.pop(channel, None)
        if since is not None:
            _safe(_write_gap.record, time.monotonic() - since, {"channel": channel})
