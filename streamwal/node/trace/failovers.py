"""Recent failovers from Jaeger: "why was this channel down for 5 s?".

A failover is a trace rooted at ``cluster.failover`` (tag
``streamwal.cluster.reason=node-lost``): from the dead owner's last lease renewal to the
first write its new owner acknowledged, its parts (evidence, waits, the balancer's
move, the new owner's open, the first write) under it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from streamwal.node.trace.jaeger import list_services, search_traces
from streamwal.node.trace.query import SpanSummary, Trace, span_summaries
from streamwal.node.trace.waterfall import format_duration

__all__ = [
    "FAILOVER_OPERATION",
    "FailoverSummary",
    "failovers_in",
    "recent_failovers",
    "render_failovers",
]

FAILOVER_OPERATION = "cluster.failover"
_REASON_TAG = "streamwal.cluster.reason"
_NODE_LOST = "node-lost"
#: the spans a failover's outage is made of (the gRPC and attempt spans are details)
_PART_OPERATIONS = ("cluster.", "wal.open")


@dataclass(frozen=True)
class FailoverPart:
    operation: str
    #: from the failover's start, and its own length
    offset_us: int
    duration_us: int


@dataclass(frozen=True)
class FailoverSummary:
    """One channel's failover; ``parts`` in the order they began."""

    trace_id: str
    channel: str
    from_node: int | None
    to_node: int | None
    evidence: str
    started_us: int
    outage_us: int
    #: how precisely the start (the last lease renewal seen) is known
    start_precision_ms: int | None
    parts: tuple[FailoverPart, ...]
    url: str

    def to_json(self) -> dict[str, Any]:
        """Every field (times in µs), plus the outage in ms."""
        return {**asdict(self), "outage_ms": self.outage_us / 1000}


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def failovers_in(trace: Trace, jaeger_url: str) -> list[FailoverSummary]:
    """The failover a trace holds (its ``cluster.failover`` root), if any."""
    spans = span_summaries(trace)
    trace_id = str(trace.get("traceID", ""))
    out = []
    for root in spans:
        if root.operation != FAILOVER_OPERATION or root.tags.get(_REASON_TAG) != _NODE_LOST:
            continue
        out.append(
            FailoverSummary(
                trace_id=trace_id,
                channel=str(root.tags.get("streamwal.channel", "")),
                from_node=_int(root.tags.get("streamwal.cluster.from")),
                to_node=_int(root.tags.get("streamwal.cluster.to")),
                evidence=str(root.tags.get("streamwal.cluster.evidence", "")),
                started_us=root.start_us,
                outage_us=root.duration_us,
                start_precision_ms=_int(
                    root.tags.get("streamwal.cluster.last_renewal_precision_ms")
                ),
                parts=_parts(root, spans),
                url=f"{jaeger_url.rstrip('/')}/trace/{trace_id}",
            )
        )
    return out


def _parts(root: SpanSummary, spans: list[SpanSummary]) -> tuple[FailoverPart, ...]:
    chosen = [
        s
        for s in spans
        if s is not root and any(s.operation.startswith(p) for p in _PART_OPERATIONS)
    ]
    chosen.sort(key=lambda s: (s.start_us, s.span_id))
    return tuple(
        FailoverPart(s.operation, s.start_us - root.start_us, s.duration_us) for s in chosen
    )


async def recent_failovers(
    jaeger_url: str,
    *,
    channel: str | None = None,
    since_s: float = 3600.0,
    limit: int | None = None,
) -> list[FailoverSummary]:
    """The failovers Jaeger holds that began in the last ``since_s`` seconds, newest
    first; only ``channel``'s when given."""
    end_us = int(time.time() * 1_000_000)
    start_us = end_us - int(since_s * 1_000_000)
    tags = {_REASON_TAG: _NODE_LOST}
    if channel:
        tags["streamwal.channel"] = channel
    traces = await search_traces(
        jaeger_url,
        await list_services(jaeger_url),
        FAILOVER_OPERATION,
        start_us=start_us,
        end_us=end_us,
        tags=tags,
    )
    found = {
        f.trace_id: f
        for trace in traces
        for f in failovers_in(trace, jaeger_url)
        if f.started_us >= start_us and (channel is None or f.channel == channel)
    }
    newest = sorted(found.values(), key=lambda f: -f.started_us)
    return newest[:limit] if limit is not None else newest


def render_failovers(failovers: list[FailoverSummary]) -> list[str]:
    """One line per failover, then its parts (offset from its start, length)."""
    if not failovers:
        return ["no failovers in that window"]
    width = max(7, *(len(f.channel) for f in failovers))
    lines = [f"{'outage':>10}  {'from':>4} {'to':>4}  {'channel':<{width}}  evidence / trace"]
    for f in failovers:
        precision = f" (start known to {f.start_precision_ms} ms)" if f.start_precision_ms else ""
        lines.append(
            f"{format_duration(f.outage_us):>10}  {_node(f.from_node):>4} {_node(f.to_node):>4}  "
            f"{f.channel:<{width}}  {f.evidence}{precision}"
        )
        lines.append(f"{'':>10}  {f.url}")
        for part in f.parts:
            lines.append(
                f"{'':>10}  +{format_duration(part.offset_us):>10} "
                f"{format_duration(part.duration_us):>10}  {part.operation}"
            )
    return lines


def _node(node: int | None) -> str:
    return "-" if node is None or node < 0 else str(node)
