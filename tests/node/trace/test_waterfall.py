"""The terminal views of a trace, checked line by line on a trace built by hand."""

from __future__ import annotations

import argparse
import json

import pytest

from streamwal.node.trace.cli import parse_since
from streamwal.node.trace.model import trace_view
from streamwal.node.trace.opens import opens_in, render_opens
from streamwal.node.trace.waterfall import render_waterfall
from tests.node.trace.jaeger_json import failed, open_trace, span, tag

BAR = "|========================|"


def test_waterfall_lines() -> None:
    lines = render_waterfall(trace_view(open_trace()))
    assign = "/streamwal.v1.StreamingNode/AssignChannel"
    tt = "465069542623887361"
    error = " " * 71 + "! UnavailableError: broker unreachable"
    assert lines == [
        f"trace {'ab' * 16}: 6 spans, 2600.0 ms, services demo, node",
        "    offset   duration  status node  timeline                    span",
        f"    0.0 ms  2600.0 ms  ok        -  {BAR}  {assign}  [demo]",
        f"   10.0 ms  2580.0 ms  -         2  {BAR}  `- {assign}  [node]",
        f"   20.0 ms  2540.0 ms  ok        2  {BAR}    `- wal.open  [node]  channel=demo-a "
        f"attempts=3 first_time_tick={tt} message_id=12:0:-1",
        "   30.0 ms  1000.0 ms  ERROR     2  |==========              |      "
        "`- wal.first_time_tick.attempt  [node]  attempt=1 backoff_ms=0",
        error,
        " 1050.0 ms  1000.0 ms  ERROR     2  |         ==========     |      "
        "`- wal.first_time_tick.attempt  [node]  attempt=2 backoff_ms=20",
        error,
        " 2100.0 ms   400.0 ms  -         2  |                   =====|      "
        f"`- wal.first_time_tick.attempt  [node]  attempt=3 backoff_ms=40 time_tick={tt} "
        "message_id=12:0:-1",
    ]
    # the error sits under the operation of the span it belongs to
    assert lines[6].index("!") == lines[5].index("wal.first_time_tick.attempt")


def test_spans_are_in_tree_order_with_their_node() -> None:
    view = trace_view(open_trace())
    assert [s.span_id for s in view.spans] == ["c1", "s1", "o1", "a1", "a2", "a3"]
    assert [s.depth for s in view.spans] == [0, 1, 2, 3, 3, 3]
    assert view.spans[0].node is None  # the client ran it, not a node
    assert {s.node for s in view.spans[1:]} == {"2"}
    attempts = [s for s in view.spans if s.operation == "wal.first_time_tick.attempt"]
    assert [s.attributes["attempt"] for s in attempts] == [1, 2, 3]
    assert [s.status for s in attempts] == ["error", "error", "unset"]
    assert attempts[2].attributes["time_tick"] == 465069542623887361  # Jaeger sent it as text
    assert view.to_json()["spans"][3]["errors"] == ["UnavailableError: broker unreachable"]


def test_a_span_without_a_node_of_its_own_takes_its_parents() -> None:
    trace = open_trace()
    trace["processes"]["p-node"]["tags"] = []  # a process hosting several nodes
    trace["spans"].append(span("x1", "tso.sync", 40, 5, parent="a1"))
    trace["spans"].append(span("x2", "orphan", 50, 5, parent="gone"))
    served = span("x3", "AllocTimestamp", 41, 1, parent="x1", tags={"span.kind": "server"})
    trace["spans"].append(served)
    view = trace_view(trace)
    by_id = {s.span_id: s for s in view.spans}
    assert by_id["x1"].node == "2" and by_id["x1"].depth == 4
    assert by_id["x3"].node is None  # served elsewhere: its caller's node is not its own
    assert by_id["x2"].node is None and by_id["x2"].depth == 0  # its parent never arrived


def test_an_error_without_an_exception_shows_its_status_description() -> None:
    trace = {
        "traceID": "cd" * 16,
        "spans": [
            span("z", "wal.open", 0, 10, trace_id="cd" * 16, tags={
                "otel.status_code": "ERROR", "otel.status_description": "cancelled"})
        ],
        "processes": {"p-node": {"serviceName": "node", "tags": []}},
    }  # fmt: skip
    (only,) = trace_view(trace).spans
    assert only.status == "error" and only.errors == ("cancelled",)


def test_opens_table_counts_attempts_and_collapses_repeated_errors() -> None:
    (found,) = opens_in(open_trace())
    assert (found.channel, found.node, found.attempts, found.failed_attempts) == (
        "demo-a",
        "2",
        3,
        2,
    )
    assert found.duration_us == 2_540_000
    assert render_opens([found]) == [
        "  duration attempts failed  status node  channel  started (UTC)        trace",
        f" 2540.0 ms        3      2  ok        2  demo-a   2025-12-01 02:20:00  {'ab' * 16}",
        " " * 41 + "! UnavailableError: broker unreachable (x2)",
    ]
    as_json = json.loads(json.dumps(found.to_json()))
    assert as_json["errors"] == ["UnavailableError: broker unreachable"] * 2
    assert as_json["started"] == "2025-12-01T02:20:00.020+00:00"
    assert render_opens([]) == ["no opens in that window"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("15m", 900.0), ("1h", 3600.0), ("2d", 172800.0), ("30", 30.0)],
)
def test_since(text: str, seconds: float) -> None:
    assert parse_since(text) == seconds


@pytest.mark.parametrize("text", ["", "0m", "-1h", "1w", "h"])
def test_since_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_since(text)


def test_tag_helper_types() -> None:  # the fixture's own types match Jaeger's
    assert tag("a", True)["type"] == "bool" and tag("a", 1)["type"] == "int64"


def test_a_call_ended_with_a_grpc_status_shows_the_status_not_the_abort() -> None:
    """A handler ends a call with ``context.abort``: the server span records gRPC's
    ``AbortError`` (noise), the client span the status and its details."""
    refused = {"rpc.grpc.status_code": 9}
    trace = {
        "traceID": "ef" * 16,
        "spans": [
            span("c", "Produce", 0, 10, trace_id="ef" * 16, tags={
                "span.kind": "client", **failed("channel 'a' is fenced"), **refused}),
            span("s", "Produce", 1, 8, parent="c", trace_id="ef" * 16,
                 tags={"span.kind": "server", "streamwal.node.id": 1, **refused},
                 exception=("grpc._cython.cygrpc.AbortError", "Locally aborted.")),
            span("k", "Produce", 20, 5, trace_id="ef" * 16, tags={
                "span.kind": "client", "rpc.grpc.status_code": 0}),
        ],
        "processes": {"p-node": {"serviceName": "node", "tags": []}},
    }  # fmt: skip
    client, server, fine = trace_view(trace).spans
    assert client.errors == ("FAILED_PRECONDITION: channel 'a' is fenced",)
    assert (server.status, server.errors) == ("unset", ("gRPC FAILED_PRECONDITION",))
    assert fine.errors == ()


def test_spans_that_are_their_own_ancestors_are_each_shown_once() -> None:
    trace = {
        "traceID": "aa" * 16,
        "spans": [
            span("p", "one", 0, 5, parent="q", trace_id="aa" * 16),
            span("q", "two", 1, 5, parent="p", trace_id="aa" * 16),
        ],
        "processes": {"p-node": {"serviceName": "node", "tags": []}},
    }
    view = trace_view(trace)
    assert [(s.span_id, s.depth) for s in view.spans] == [("p", 0), ("q", 1)]


def test_the_json_of_a_trace_has_the_fields_the_docs_name() -> None:
    # docs/traces.md and docs/cli.md: times in µs, the ms a person reads beside them
    view = trace_view(open_trace())
    as_json = view.to_json()
    assert set(as_json) == {"trace_id", "start_us", "duration_us", "duration_ms", "spans"}
    assert as_json["duration_us"] == view.duration_us > 0
    assert as_json["duration_ms"] == view.duration_us / 1000
    assert {"offset_us", "duration_us", "start_offset_ms", "duration_ms"} <= set(
        as_json["spans"][0]
    )
