"""Jaeger JSON -> typed span summaries, and the Go build spec's validation."""

from __future__ import annotations

from typing import Any

import pytest

from streamwal.node.trace.query import (
    find_traces,
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
