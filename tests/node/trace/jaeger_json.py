"""Jaeger query-API JSON for a trace built by hand, for unit tests of the trace views."""

from __future__ import annotations

from typing import Any

T0 = 1_764_555_600_000_000  # 2025-12-01 02:20:00 UTC, in µs


def tag(key: str, value: Any) -> dict[str, Any]:
    kind = {bool: "bool", int: "int64", float: "float64"}.get(type(value), "string")
    return {"key": key, "type": kind, "value": value}


def span(
    span_id: str,
    operation: str,
    start_ms: float,
    duration_ms: float,
    *,
    parent: str | None = None,
    process: str = "p-node",
    tags: dict[str, Any] | None = None,
    exception: tuple[str, str] | None = None,
    trace_id: str = "ab" * 16,
) -> dict[str, Any]:
    logs = []
    if exception is not None:
        logs.append(
            {
                "timestamp": T0 + int(start_ms * 1000),
                "fields": [
                    tag("event", "exception"),
                    tag("exception.type", exception[0]),
                    tag("exception.message", exception[1]),
                ],
            }
        )
    return {
        "traceID": trace_id,
        "spanID": span_id,
        "operationName": operation,
        "references": (
            [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": parent}] if parent else []
        ),
        "startTime": T0 + int(start_ms * 1000),
        "duration": int(duration_ms * 1000),
        "processID": process,
        "tags": [tag(k, v) for k, v in (tags or {}).items()],
        "logs": logs,
    }


def failed(message: str) -> dict[str, Any]:
    return {"otel.status_code": "ERROR", "otel.status_description": message, "error": True}


def open_trace(trace_id: str = "ab" * 16) -> dict[str, Any]:
    """A client's AssignChannel, served by node 2, whose open took three attempts."""
    error = "UnavailableError('broker unreachable')"
    spans = [
        span(
            "a3", "wal.first_time_tick.attempt", 2100, 400, parent="o1",
            tags={"wal.attempt": 3, "wal.backoff_ms": 40.0, "streamwal.node.id": 2,
                  "wal.time_tick": "465069542623887361", "wal.message_id": "12:0:-1"},
        ),
        span("c1", "/streamwal.v1.StreamingNode/AssignChannel", 0, 2600, process="p-client",
             tags={"span.kind": "client", "otel.status_code": "OK"}),
        span("s1", "/streamwal.v1.StreamingNode/AssignChannel", 10, 2580, parent="c1",
             tags={"span.kind": "server", "streamwal.node.id": 2}),
        span("o1", "wal.open", 20, 2540, parent="s1",
             tags={"wal.channel": "demo-a", "streamwal.node.id": 2, "wal.attempts": 3,
                   "wal.first_time_tick": "465069542623887361", "wal.message_id": "12:0:-1",
                   "otel.status_code": "OK"}),
        span("a1", "wal.first_time_tick.attempt", 30, 1000, parent="o1",
             tags={"wal.attempt": 1, "wal.backoff_ms": 0.0, "streamwal.node.id": 2,
                   **failed(error)},
             exception=("streamwal.errors.UnavailableError", "broker unreachable")),
        span("a2", "wal.first_time_tick.attempt", 1050, 1000, parent="o1",
             tags={"wal.attempt": 2, "wal.backoff_ms": 20.0, "streamwal.node.id": 2,
                   **failed(error)},
             exception=("streamwal.errors.UnavailableError", "broker unreachable")),
    ]  # fmt: skip
    return {
        "traceID": trace_id,
        "spans": spans,
        "processes": {
            "p-client": {"serviceName": "demo", "tags": []},
            "p-node": {"serviceName": "node", "tags": [tag("streamwal.node.id", 2)]},
        },
    }
