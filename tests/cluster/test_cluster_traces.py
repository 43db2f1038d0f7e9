"""One trace answers why a channel moved and how long until its new owner could write:
the balancer's ``cluster.move`` span, and the new owner's ``wal.open`` inside it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal.cluster.operations import drain_node
from streamwal.cluster.records import MoveReason
from streamwal.node.trace.query import get_trace, span_summaries
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster

pytestmark = pytest.mark.integration


async def test_the_new_owners_open_joins_the_balancers_move_trace(
    telemetry_stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str], unique: str
) -> None:
    info = telemetry_stack
    assert info.otlp_endpoint and info.jaeger_url
    channel = f"cl-traced-{unique}"
    cluster = TestCluster(info, tmp_path, etcd_prefix("cltrace"), [channel])
    cluster.extra = {
        "telemetry": {
            "service_name": f"streamwal-cluster-trace-{unique}",
            "otlp_endpoint": info.otlp_endpoint,
        }
    }
    try:
        await cluster.start(1, 2)
        view = await cluster.wait_balanced()
        owner = view.assignments[channel].node
        view = await drain_node(cluster.store, cluster.keys, owner, timeout_s=60)
        move = next(m for _k, m in reversed(view.moves) if m.channel == channel)
        assert move.reason == MoveReason.DRAIN and move.previous == owner
        for process in cluster.nodes.values():
            assert await process.terminate() == 0  # flushes the exporters
    finally:
        await cluster.close()
    # the balancer's span and the new owner's come from two processes' exporters
    trace = await get_trace(
        info.jaeger_url, move.trace_id, operation="wal.open", also=("cluster.move",), timeout=60
    )
    assert trace is not None, move.trace_id
    spans = span_summaries(trace)
    decision = next(s for s in spans if s.operation == "cluster.move")
    assert decision.tags["streamwal.channel"] == channel
    assert decision.tags["streamwal.cluster.reason"] == MoveReason.DRAIN
    assert decision.tags["streamwal.cluster.to"] == move.node
    opens = [s for s in spans if s.operation == "wal.open"]
    assert len(opens) == 1 and opens[0].parent_id == decision.span_id
    assert opens[0].tags["wal.channel"] == channel
    assert opens[0].start_us >= decision.start_us
