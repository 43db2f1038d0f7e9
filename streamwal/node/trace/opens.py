"""Recent channel opens from Jaeger, slowest first: "why did this channel take 7 s?".

An open is a ``wal.open`` span; its ``wal.first_time_tick.attempt`` children are the
tries to fence and persist the first time tick, each failed one carrying the
exception that made the node wait and try again.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from streamwal.node.trace.jaeger import list_services, search_traces
from streamwal.node.trace.model import error_messages, span_status
from streamwal.node.trace.query import SpanSummary, Trace, span_summaries
from streamwal.node.trace.waterfall import format_duration, status_label

__all__ = [
    "ATTEMPT_OPERATION",
    "OPEN_OPERATION",
    "OpenSummary",
    "opens_in",
    "recent_opens",
    "render_opens",
]

OPEN_OPERATION = "wal.open"
ATTEMPT_OPERATION = "wal.first_time_tick.attempt"


@dataclass(frozen=True)
class OpenSummary:
    """One open of a channel; ``errors`` has one entry per failed attempt, in order."""

    trace_id: str
    span_id: str
    channel: str
    node: str | None
    service: str
    started_us: int
    duration_us: int
    attempts: int
    failed_attempts: int
    status: str
    errors: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """Every field (times in µs), plus the start as ISO text and the duration in ms."""
        return {
            **asdict(self),
            "errors": list(self.errors),
            "started": _utc(self.started_us, iso=True),
            "duration_ms": self.duration_us / 1000,
        }


def opens_in(trace: Trace) -> list[OpenSummary]:
    """Every ``wal.open`` of one trace (a move's trace may hold one per node)."""
    spans = span_summaries(trace)
    out = []
    for span in spans:
        if span.operation != OPEN_OPERATION:
            continue
        attempts = sorted(
            (s for s in spans if s.operation == ATTEMPT_OPERATION and s.parent_id == span.span_id),
            key=lambda s: (s.start_us, s.span_id),
        )
        failed = [s for s in attempts if span_status(s) == "error"]
        node = span.tags.get("streamwal.node.id", span.process_tags.get("streamwal.node.id"))
        out.append(
            OpenSummary(
                trace_id=str(trace.get("traceID", "")),
                span_id=span.span_id,
                channel=str(span.tags.get("wal.channel", "")),
                node=None if node is None else str(node),
                service=span.service,
                started_us=span.start_us,
                duration_us=span.duration_us,
                attempts=_attempts(span, attempts),
                failed_attempts=len(failed),
                status=span_status(span),
                errors=tuple(_first_error(s) for s in failed),
            )
        )
    return out


def _attempts(span: SpanSummary, attempts: list[SpanSummary]) -> int:
    recorded = span.tags.get("wal.attempts")
    try:
        return max(int(recorded), len(attempts)) if recorded is not None else len(attempts)
    except (TypeError, ValueError):
        return len(attempts)


def _first_error(span: SpanSummary) -> str:
    messages = error_messages(span)
    return messages[0] if messages else "error (no message recorded)"


async def recent_opens(
    jaeger_url: str,
    *,
    channel: str | None = None,
    since_s: float = 3600.0,
    services: list[str] | None = None,
    limit: int | None = None,
) -> list[OpenSummary]:
    """The opens Jaeger holds that started in the last ``since_s`` seconds, slowest
    first (``limit`` of them, when given); only ``channel``'s when given."""
    end_us = int(time.time() * 1_000_000)
    start_us = end_us - int(since_s * 1_000_000)
    names = services if services else await list_services(jaeger_url)
    traces = await search_traces(
        jaeger_url,
        names,
        OPEN_OPERATION,
        start_us=start_us,
        end_us=end_us,
        tags={"wal.channel": channel} if channel else None,
    )
    seen: set[tuple[str, str]] = set()
    opens = []
    for trace in traces:
        for found in opens_in(trace):
            key = (found.trace_id, found.span_id)
            if key in seen or found.started_us < start_us:
                continue
            if channel is not None and found.channel != channel:
                continue
            seen.add(key)
            opens.append(found)
    opens.sort(key=lambda o: (-o.duration_us, o.started_us))
    return opens[:limit] if limit is not None else opens


def render_opens(opens: list[OpenSummary]) -> list[str]:
    """A table, slowest first, each failed attempt's error below its open (repeats
    of one message counted, not repeated)."""
    if not opens:
        return ["no opens in that window"]
    width = max(7, *(len(o.channel) for o in opens))
    lines = [
        f"{'duration':>10} {'attempts':>8} {'failed':>6}  {'status':<6} {'node':>4}  "
        f"{'channel':<{width}}  {'started (UTC)':<19}  trace"
    ]
    pad = " " * (10 + 1 + 8 + 1 + 6 + 2 + 6 + 1 + 4 + 2)
    for o in opens:
        lines.append(
            f"{format_duration(o.duration_us):>10} {o.attempts:>8} {o.failed_attempts:>6}  "
            f"{status_label(o.status):<6} {o.node or '-':>4}  "
            f"{o.channel:<{width}}  {_utc(o.started_us)}  {o.trace_id}"
        )
        for message, count in Counter(o.errors).items():
            lines.append(f"{pad}! {message}" + (f" (x{count})" if count > 1 else ""))
    return lines


def _utc(us: int, *, iso: bool = False) -> str:
    moment = datetime.fromtimestamp(us / 1_000_000, tz=UTC)
    if iso:
        return moment.isoformat(timespec="milliseconds")
    return moment.strftime("%Y-%m-%d %H:%M:%S")
