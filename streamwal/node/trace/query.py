"""Read traces back from Jaeger's HTTP query API: typed span summaries, and polling.

``streamwal trace`` reads its answers through the parsing helpers here, which is why
this client is the product's; tests and the lab's demo and chaos runner use the
polling too.

Spans travel process -> collector (batched) -> Jaeger (batched), so a span is
visible in Jaeger only some time after the exporter flushed it: :func:`find_traces`
polls until enough matching spans are there or its deadline passes. The helpers
that follow turn Jaeger's JSON into typed summaries.

Each poll is a blocking HTTP request run in a thread with its own timeout, so a
cancelled :func:`find_traces` returns within one request timeout at worst.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

__all__ = [
    "HTTPStatusError",
    "SpanLog",
    "SpanSummary",
    "find_traces",
    "get_data",
    "get_trace",
    "span_summaries",
    "span_tree_summary",
    "spans_by_operation",
]

Trace = Mapping[str, Any]

_REQUEST_TIMEOUT = 5.0


async def find_traces(
    jaeger_url: str,
    service: str,
    *,
    operation: str | None = None,
    min_spans: int = 1,
    timeout: float = 30.0,
    interval: float = 0.5,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Jaeger's ``data`` list for ``GET /api/traces?service=...`` once it is complete enough.

    Polls until the traces hold at least ``min_spans`` spans of ``service`` (named
    ``operation``, when given) or ``timeout`` seconds passed; then returns what the
    last answer held, possibly fewer spans or ``[]``, so a caller's assertion shows
    what did arrive. Raises ``ValueError`` for bad arguments and ``ConnectionError``
    when Jaeger never answered within ``timeout``.
    """
    if not service:
        raise ValueError("service: must not be empty")
    if min_spans < 1:
        raise ValueError(f"min_spans: must be at least 1, got {min_spans}")
    if timeout <= 0 or interval <= 0:
        raise ValueError("timeout and interval: must be positive")
    query = {"service": service, "limit": str(limit)}
    if operation is not None:
        query["operation"] = operation
    url = f"{jaeger_url.rstrip('/')}/api/traces?{urlencode(query)}"
    traces, last_error = await _poll(
        url, timeout, interval, lambda data: _count_spans(data, service, operation) >= min_spans
    )
    if traces is None:
        raise ConnectionError(f"Jaeger at {jaeger_url} did not answer: {last_error}")
    return traces


async def get_trace(
    jaeger_url: str,
    trace_id: str,
    *,
    operation: str | None = None,
    timeout: float = 30.0,
    interval: float = 0.5,
    also: tuple[str, ...] = (),
) -> dict[str, Any] | None:
    """The trace ``GET /api/traces/<trace_id>`` returns, polled until Jaeger has it
    (and, when ``operation`` is given, a span of that name, and one of each name in
    ``also``: a trace's spans can reach Jaeger in several batches, from several
    processes).

    ``None`` if it is not there within ``timeout`` seconds (Jaeger answers 404 for a
    trace it does not hold, or did not answer at all).
    """
    if not trace_id:
        raise ValueError("trace_id: must not be empty")
    url = f"{jaeger_url.rstrip('/')}/api/traces/{trace_id}"
    wanted = {*also, *(() if operation is None else (operation,))}

    def complete(data: list[Any]) -> dict[str, Any] | None:
        found: dict[str, Any] = data[0] if data else {}
        spans = found.get("spans")
        return found if spans and wanted <= {x.get("operationName") for x in spans} else None

    # Jaeger answers 404 for a trace until its spans arrive
    data, _ = await _poll(url, timeout, interval, lambda data: complete(data) is not None)
    return None if data is None else complete(data)


async def _poll(
    url: str, timeout: float, interval: float, enough: Callable[[list[Any]], bool]
) -> tuple[list[Any] | None, Exception | None]:
    """``GET url`` every ``interval`` seconds until an answer is ``enough`` or
    ``timeout`` passed: the last answer (``None``: Jaeger never gave one) and the last
    failure. A failed request (Jaeger not up yet, an HTTP error) is tried again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    answer: list[Any] | None = None
    last_error: Exception | None = None
    while True:
        try:
            answer = await asyncio.to_thread(get_data, url)
            if enough(answer):
                return answer, None
        except (OSError, ValueError) as exc:  # URLError/HTTPError are OSErrors
            last_error = exc
        remaining = deadline - loop.time()
        if remaining <= 0:
            return answer, last_error
        await asyncio.sleep(min(interval, remaining))


class HTTPStatusError(ConnectionError):
    """Jaeger answered with an HTTP error; ``status`` tells a missing trace (404) apart."""

    def __init__(self, url: str, status: int) -> None:
        self.status = status
        super().__init__(f"GET {url}: HTTP {status}")


def get_data(url: str, timeout: float = _REQUEST_TIMEOUT) -> list[Any]:
    """The ``data`` list of one Jaeger API answer; blocking, one request.

    Raises :class:`HTTPStatusError` for an HTTP error, another ``OSError`` when Jaeger
    does not answer, ``ValueError`` for an answer that is not Jaeger's JSON.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise HTTPStatusError(url, exc.code) from exc
    if not isinstance(body, dict):
        raise ValueError(f"GET {url}: unexpected answer {body!r:.200}")
    data = body.get("data") or []
    if not isinstance(data, list):
        raise ValueError(f"GET {url}: 'data' is not a list")
    return data


def _count_spans(traces: list[dict[str, Any]], service: str, operation: str | None) -> int:
    return sum(
        1
        for trace in traces
        for span in span_summaries(trace)
        if span.service == service and (operation is None or span.operation == operation)
    )


@dataclass(frozen=True)
class SpanLog:
    """One span event: its time (µs since the epoch) and its fields by key."""

    timestamp_us: int
    fields: Mapping[str, Any]

    @property
    def event(self) -> str:
        """The event name (OpenTelemetry span events arrive with an ``event`` field)."""
        return str(self.fields.get("event", ""))


@dataclass(frozen=True)
class SpanSummary:
    """The parts of a Jaeger span a test asserts on; tags are typed JSON values.

    ``process_tags`` are the tags of the span's process: the OpenTelemetry resource
    attributes other than ``service.name``.
    """

    operation: str
    service: str
    span_id: str
    parent_id: str | None
    start_us: int
    duration_us: int
    tags: Mapping[str, Any]
    logs: tuple[SpanLog, ...]
    process_tags: Mapping[str, Any] = field(default_factory=dict)


def span_summaries(trace: Trace) -> list[SpanSummary]:
    """Every span of one trace (an element of :func:`find_traces`), by start time."""
    processes: Mapping[str, Any] = trace.get("processes") or {}
    out = []
    for span in trace.get("spans") or []:
        parent = next(
            (
                ref.get("spanID")
                for ref in span.get("references") or []
                if ref.get("refType") == "CHILD_OF" and ref.get("traceID") == span.get("traceID")
            ),
            None,
        )
        process = processes.get(span.get("processID", ""), {})
        out.append(
            SpanSummary(
                operation=str(span.get("operationName", "")),
                service=str(process.get("serviceName", "")),
                span_id=str(span.get("spanID", "")),
                parent_id=str(parent) if parent else None,
                start_us=int(span.get("startTime", 0)),
                duration_us=int(span.get("duration", 0)),
                tags=_key_values(span.get("tags")),
                logs=tuple(
                    SpanLog(int(log.get("timestamp", 0)), _key_values(log.get("fields")))
                    for log in span.get("logs") or []
                ),
                process_tags=_key_values(process.get("tags")),
            )
        )
    out.sort(key=lambda s: (s.start_us, s.span_id))
    return out


def spans_by_operation(trace: Trace) -> dict[str, list[SpanSummary]]:
    """The spans of one trace grouped by operation name, each group by start time."""
    grouped: dict[str, list[SpanSummary]] = {}
    for span in span_summaries(trace):
        grouped.setdefault(span.operation, []).append(span)
    return grouped


def span_tree_summary(trace: Trace) -> str:
    """An indented parent/child rendering of one trace, for logs and failure messages.

    One line per span: ``service: operation (duration ms) key=value ...`` with its
    events' names in brackets; spans whose parent is not in the trace are roots.
    """
    spans = span_summaries(trace)
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[SpanSummary]] = {}
    for span in spans:
        parent = span.parent_id if span.parent_id in ids else None
        children.setdefault(parent, []).append(span)
    lines: list[str] = []
    seen: set[str] = set()  # a malformed trace may reference itself

    def walk(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            if span.span_id in seen:
                continue
            seen.add(span.span_id)
            tags = " ".join(f"{k}={v}" for k, v in sorted(span.tags.items()))
            events = ", ".join(log.event or "log" for log in span.logs)
            millis = span.duration_us / 1000
            line = f"{'  ' * depth}{span.service}: {span.operation} ({millis:.1f} ms)"
            line += f" {tags}" if tags else ""
            line += f" [{events}]" if events else ""
            lines.append(line)
            walk(span.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


def _key_values(items: Any) -> dict[str, Any]:
    if not isinstance(items, list):
        return {}
    return {str(kv.get("key")): kv.get("value") for kv in items if isinstance(kv, dict)}
