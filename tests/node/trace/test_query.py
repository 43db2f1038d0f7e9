"""Jaeger JSON -> typed span summaries, the polling of Jaeger's query API, and the Go
build spec's validation."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from streamwal.node.trace.query import (
    find_traces,
    get_trace,
    span_summaries,
    span_tree_summary,
    spans_by_operation,
)
from streamwal_lab.stack.gobuild import GoToolSpec


def _span(
    span_id: str, op: str, start: int, parent: str | None = None, **extra: Any
) -> dict[str, Any]:
    refs = [{"refType": "CHILD_OF", "traceID": "t1", "spanID": parent}] if parent else []
    return {
        "traceID": "t1",
        "spanID": span_id,
        "operationName": op,
        "references": refs,
        "startTime": start,
        "duration": 1500,
        "processID": "p1",
        "tags": extra.get("tags", []),
        "logs": extra.get("logs", []),
    }


TRACE: dict[str, Any] = {
    "traceID": "t1",
    "spans": [
        _span("c2", "wal.flush", 30, parent="a"),
        _span(
            "b1",
            "wal.append",
            20,
            parent="a",
            tags=[{"key": "channel", "type": "string", "value": "ch-1"}],
            logs=[
                {
                    "timestamp": 25,
                    "fields": [
                        {"key": "event", "type": "string", "value": "fenced"},
                        {"key": "offset", "type": "int64", "value": 4},
                    ],
                }
            ],
        ),
        _span("a", "node.handle", 10, tags=[{"key": "ok", "type": "bool", "value": True}]),
        _span("b2", "wal.append", 40, parent="a"),
    ],
    "processes": {
        "p1": {
            "serviceName": "svc",
            "tags": [{"key": "streamwal.node.id", "type": "int64", "value": 3}],
        }
    },
}


def test_span_summaries_are_typed_and_ordered_by_start() -> None:
    spans = span_summaries(TRACE)
    assert [s.span_id for s in spans] == ["a", "b1", "c2", "b2"]
    root, append = spans[0], spans[1]
    assert root.parent_id is None and root.tags == {"ok": True} and root.service == "svc"
    assert root.process_tags == {"streamwal.node.id": 3}
    assert append.parent_id == "a"
    assert append.tags == {"channel": "ch-1"}
    assert [(log.timestamp_us, log.event, log.fields["offset"]) for log in append.logs] == [
        (25, "fenced", 4)
    ]


def test_spans_by_operation_groups_in_start_order() -> None:
    grouped = spans_by_operation(TRACE)
    assert sorted(grouped) == ["node.handle", "wal.append", "wal.flush"]
    assert [s.span_id for s in grouped["wal.append"]] == ["b1", "b2"]


def test_span_tree_summary_indents_children_under_parents() -> None:
    lines = span_tree_summary(TRACE).splitlines()
    assert lines == [
        "svc: node.handle (1.5 ms) ok=True",
        "  svc: wal.append (1.5 ms) channel=ch-1 [fenced]",
        "  svc: wal.flush (1.5 ms)",
        "  svc: wal.append (1.5 ms)",
    ]


def test_span_tree_summary_survives_a_self_referencing_span() -> None:
    trace = {"spans": [_span("x", "loop", 1, parent="x")], "processes": {}}
    assert span_tree_summary(trace) == ""  # its parent is in the trace: not a root
    orphan = {"spans": [_span("y", "orphan", 1, parent="gone")], "processes": {}}
    assert span_tree_summary(orphan) == ": orphan (1.5 ms)"


async def test_find_traces_raises_when_jaeger_never_answers() -> None:
    # port 9 (discard) is closed on loopback: every poll fails to connect
    with pytest.raises(ConnectionError, match="did not answer"):
        await find_traces("http://127.0.0.1:9", "svc", timeout=0.3, interval=0.1)


class _Jaeger:
    """A Jaeger query API on loopback answering what a test sets: 404 while the trace
    is ``None``, else ``{"data": [trace]}``; it counts the requests."""

    def __init__(self) -> None:
        self.trace: dict[str, Any] | None = None
        self.requests = 0
        jaeger = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jaeger.requests += 1
                if jaeger.trace is None:
                    self.send_error(404)
                    return
                body = json.dumps({"data": [jaeger.trace]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def jaeger() -> Iterator[_Jaeger]:
    fake = _Jaeger()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()


def _trace(*operations: str) -> dict[str, Any]:
    spans = [_span(f"s{i}", op, 1000 + i) for i, op in enumerate(operations)]
    return {"traceID": "t1", "spans": spans, "processes": {"p1": {"serviceName": "svc"}}}


async def test_get_trace_polls_until_the_trace_holds_every_span_asked_for(
    jaeger: _Jaeger,
) -> None:
    jaeger.trace = _trace("a")
    assert await get_trace(jaeger.url, "t1", operation="b", timeout=0.3, interval=0.05) is None
    assert jaeger.requests > 1  # asked again until the bound
    jaeger.trace = None  # 404: not there yet
    assert await get_trace(jaeger.url, "t1", timeout=0.2, interval=0.05) is None
    jaeger.trace = _trace("a", "b")
    found = await get_trace(jaeger.url, "t1", operation="b", also=("a",), timeout=5)
    assert found is not None and len(found["spans"]) == 2


async def test_find_traces_gives_the_last_answer_when_too_few_spans_arrive(
    jaeger: _Jaeger,
) -> None:
    jaeger.trace = _trace("a")
    enough = await find_traces(jaeger.url, "svc", timeout=5)
    assert [t["traceID"] for t in enough] == ["t1"]
    short = await find_traces(jaeger.url, "svc", min_spans=2, timeout=0.3, interval=0.05)
    assert len(short) == 1 and len(short[0]["spans"]) == 1  # what did arrive


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "", "version": "v1", "tool": "x/y@v1"}, "name"),
        ({"name": "a/b", "version": "v1", "tool": "x/y@v1"}, "name"),
        ({"name": "x", "version": "", "tool": "x/y@v1"}, "version"),
        ({"name": "x", "version": "v1", "tool": "x/y"}, "tool"),
        ({"name": "x", "version": "v1", "tool": "x/y@v1", "requires": ("m",)}, "requires"),
        ({"name": "x", "version": "v1"}, "target"),
    ],
)
def test_go_tool_spec_rejects_bad_fields(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        GoToolSpec(**kwargs)


def test_go_tool_spec_builds_the_tool_package_by_default() -> None:
    spec = GoToolSpec(name="jaeger", version="v1.76.0", tool="example.com/cmd/jaeger@v1.76.0")
    assert spec.build_target == "example.com/cmd/jaeger"
    assert spec.module_path.endswith("/jaeger")
