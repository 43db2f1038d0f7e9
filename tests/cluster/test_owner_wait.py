"""A client call's wait for a channel's owner, as a span (no cluster needed): why it
waited, how long, and a link to the move whose assignment ended the wait."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamwal.cluster import waits
from streamwal.cluster.failover import new_failover
from streamwal.cluster.records import Assignment, MoveReason
from streamwal.errors import ChannelNotFoundError, UnavailableError
from tests.cluster.spans import capture_module_spans


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    return capture_module_spans(monkeypatch, waits)[1]


def test_the_reasons_of_a_wait() -> None:
    no_owner = ChannelNotFoundError("ch", f"channel 'ch' {waits.NO_OWNER_DETAIL}")
    assert waits.wait_reason(no_owner) == waits.NO_OWNER
    assert waits.wait_reason(ChannelNotFoundError("ch")) == waits.OWNER_GONE
    assert waits.wait_reason(UnavailableError("etcd")) == waits.OWNER_GONE


def test_a_wait_is_a_span_linked_to_the_move_that_ended_it(spans: InMemorySpanExporter) -> None:
    move, failover = new_failover(), new_failover()
    assignment = Assignment("ch", 2, 4, MoveReason.NODE_LOST, 1, 1, 1, move, failover, 1, 1000, "x")
    wait = waits.OwnerWait("ch")
    wait.failed(ChannelNotFoundError("ch", f"channel 'ch' {waits.NO_OWNER_DETAIL}"))
    wait.failed(ChannelNotFoundError("ch"))
    wait.failed(ChannelNotFoundError("ch", f"channel 'ch' {waits.NO_OWNER_DETAIL}"))
    wait.ended(assignment)
    (span,) = spans.get_finished_spans()
    assert span.name == "cluster.follow" and span.attributes is not None
    assert span.attributes["streamwal.cluster.wait_reason"] == waits.NO_OWNER
    assert list(span.attributes["streamwal.cluster.wait_reasons"]) == [  # type: ignore[arg-type]
        waits.NO_OWNER,
        waits.OWNER_GONE,
    ]
    assert span.attributes["streamwal.cluster.tries"] == 4
    assert span.attributes["streamwal.cluster.to"] == 2
    move_trace = move["traceparent"].split("-")[1]
    failover_trace = failover["traceparent"].split("-")[1]
    assert span.attributes["streamwal.cluster.failover_trace_id"] == failover_trace
    assert [format(link.context.trace_id, "032x") for link in span.links] == [move_trace]
    assert span.start_time is not None and span.end_time is not None
    assert span.end_time >= span.start_time


def test_a_call_that_did_not_wait_makes_no_span(spans: InMemorySpanExporter) -> None:
    waits.OwnerWait("ch").ended(None)
    assert spans.get_finished_spans() == ()
