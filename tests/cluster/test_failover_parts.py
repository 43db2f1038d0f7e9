"""The failover trace's parts and root, without a cluster: a lease expiry without other
evidence is dated from the balancer's sighting, and the root is emitted with the ids
its children named before it ran."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamwal.cluster import failover
from streamwal.cluster.records import Assignment, Lost, MoveReason
from streamwal.node.tracing import routed_to
from tests.cluster.spans import capture_module_spans


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    provider, exporter = capture_module_spans(monkeypatch, failover)
    with routed_to(provider):
        yield exporter


def test_a_lease_expiry_is_dated_one_ttl_before_the_balancer_saw_it_gone(
    spans: InMemorySpanExporter,
) -> None:
    start = failover.FailoverStart.of(None, 10_000, ttl_ms=5_000, round_ms=500)
    assert (start.last_alive_ms, start.precision_ms) == (5_000, 1_500)
    assert start.evidence == "lease-expired"
    carrier = failover.new_failover()
    failover.emit_failover_start(carrier, start, node=3, decided_ms=16_000)
    got = {s.name: s for s in spans.get_finished_spans()}
    assert list(got) == ["cluster.wait.lease", "cluster.evidence", "cluster.wait.grace"]
    root_trace, root_span = carrier["traceparent"].split("-")[1:3]
    for span in got.values():
        assert span.parent is not None and format(span.parent.span_id, "016x") == root_span
        assert format(span.context.trace_id, "032x") == root_trace
    ms = {n: (s.start_time, s.end_time) for n, s in got.items()}
    assert ms == {
        "cluster.wait.lease": (5_000_000_000, 10_000_000_000),
        "cluster.evidence": (10_000_000_000, 10_000_000_000),
        "cluster.wait.grace": (10_000_000_000, 16_000_000_000),
    }


def test_refused_connections_are_dated_from_the_last_renewal_etcd_told() -> None:
    lost = Lost(2, 1, 7, "connection-refused", 20_000, 2, 20_500, 1, 18_000)
    start = failover.FailoverStart.of(lost, None, ttl_ms=5_000, round_ms=500)
    assert (start.last_alive_ms, start.precision_ms) == (18_000, 1_000)
    assert start.evidence == "connection-refused x2 (seen by node 1)"
    unknown = failover.FailoverStart.of(
        Lost(2, 1, 7, "connection-refused", 20_000, 2, 20_500, 1, None), None, 5_000, 500
    )
    assert (unknown.last_alive_ms, unknown.precision_ms) == (15_000, 5_000)


def test_the_root_is_emitted_with_the_ids_its_parts_named(spans: InMemorySpanExporter) -> None:
    carrier = failover.new_failover()
    assignment = Assignment(
        "ch", 3, 9, MoveReason.NODE_LOST, 1, 2, 20_000, {}, carrier, 18_000, 1_000, "x"
    )
    assert failover.emit_failover_end(assignment, 3, 21_000_000_000, 22_000_000_000)
    got = {s.name: s for s in spans.get_finished_spans()}
    root, first = got["cluster.failover"], got["cluster.first_write"]
    trace_id, span_id = carrier["traceparent"].split("-")[1:3]
    assert root.parent is None
    assert format(root.context.trace_id, "032x") == trace_id
    assert format(root.context.span_id, "016x") == span_id
    assert first.parent is not None and first.parent.span_id == root.context.span_id
    assert (root.start_time, root.end_time) == (18_000_000_000, 22_000_000_000)
    assert root.attributes is not None
    assert root.attributes["streamwal.cluster.reason"] == MoveReason.NODE_LOST
    assert root.attributes["streamwal.cluster.outage_ms"] == 4_000
    assert root.attributes["streamwal.cluster.last_renewal_precision_ms"] == 1_000
    assert (root.attributes["streamwal.cluster.from"], root.attributes["streamwal.cluster.to"]) == (
        2,
        3,
    )


def test_an_assignment_without_a_failover_emits_nothing(spans: InMemorySpanExporter) -> None:
    assignment = Assignment("ch", 3, 9, MoveReason.DRAIN, 1, 2)
    assert not failover.emit_failover_end(assignment, 3, 1, 2)
    assert spans.get_finished_spans() == ()


def test_the_evidence_links_to_the_declaration_of_the_node_lost(
    spans: InMemorySpanExporter,
) -> None:
    declared = failover.new_failover()  # any W3C context: the prober's span's here
    lost = Lost(2, 1, 7, "connection-refused", 20_000, 2, 20_500, 1, 18_000, declared)
    start = failover.FailoverStart.of(lost, None, ttl_ms=5_000, round_ms=500)
    failover.emit_failover_start(failover.new_failover(), start, node=2, decided_ms=21_000)
    (evidence,) = spans.get_finished_spans()
    assert evidence.name == "cluster.evidence"
    assert (evidence.start_time, evidence.end_time) == (20_000_000_000, 20_500_000_000)
    linked = [format(link.context.trace_id, "032x") for link in evidence.links]
    assert linked == [declared["traceparent"].split("-")[1]]
