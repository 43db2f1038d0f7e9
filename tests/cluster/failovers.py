"""Killing an owner in a 3-node cluster that exports its traces, and reading back the
failover's trace: shared by the trace test (tests/cluster/test_failover_trace.py) and
the Jaeger UI test (tests/integration/test_jaeger_ui.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamwal.cluster import ClusterClient, ClusterSettings
from streamwal.cluster.records import Move, MoveReason
from streamwal.cluster.view import ClusterView
from streamwal.node.trace.query import SpanSummary, get_trace, span_summaries
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import LEASE_TTL_S, TestCluster, Writer, owners

__all__ = ["DEFAULT_TIMES", "Killed", "failover_trace", "kill_an_owner"]

_DEFAULTS = ClusterSettings()
#: the cluster's default times, as a deployment runs them
DEFAULT_TIMES: dict[str, Any] = {
    "lease_ttl_s": _DEFAULTS.lease_ttl_s,
    "grace_period_s": _DEFAULTS.grace_period_s,
    "round_interval_s": _DEFAULTS.round_interval_s,
    "poll_interval_s": _DEFAULTS.poll_interval_s,
}


@dataclass(frozen=True)
class Killed:
    victim: int
    lease_ttl_s: float
    #: the moved channels' kill to first acknowledged write (s)
    gaps: dict[str, float]
    view: ClusterView


async def kill_an_owner(
    info: StackInfo, tmp_path: Path, prefix: str, channels: list[str], **settings: Any
) -> Killed:
    """Three nodes exporting to the stack's collector, writers on every channel; kill -9
    the owner of the first channel (not the balancer: a new balancer knows no better
    than its own first sight when a lease ran out), then stop the others, flushing."""
    cluster = TestCluster(info, tmp_path, prefix, channels, **settings)
    cluster.extra = {"telemetry": {"otlp_endpoint": info.otlp_endpoint}}
    try:
        await cluster.start(1, 2, 3)
        view = await cluster.wait_balanced()
        async with ClusterClient([info.etcd_endpoint], key_prefix=cluster.prefix) as client:
            writers = {c: Writer(client, c) for c in channels}
            for writer in writers.values():
                writer.start()
            try:
                await asyncio.sleep(1.0)
                victim = next(
                    view.assignments[c].node
                    for c in channels
                    if view.assignments[c].node != view.balancer_node
                )
                moved = [c for c, node in owners(view).items() if node == victim]
                killed_at = time.monotonic()
                await cluster.nodes[victim].kill()

                def moved_off(v: ClusterView) -> bool:
                    return all(v.serving(c) and v.assignments[c].node != victim for c in moved)

                view = await cluster.wait_for("the victim's channels elsewhere", moved_off, 60)
                await asyncio.sleep(1.0)
                firsts = {c: writers[c].first_ack_after(killed_at) for c in moved}
            finally:
                for writer in writers.values():
                    await writer.stop()
        for node, process in cluster.nodes.items():
            if node != victim:
                assert await process.terminate() == 0  # flushes the exporters
    finally:
        await cluster.close()
    gaps = {}
    for channel, first in firsts.items():
        assert first is not None, channel
        gaps[channel] = first - killed_at
    return Killed(victim, float(settings.get("lease_ttl_s", LEASE_TTL_S)), gaps, view)


async def failover_trace(
    info: StackInfo, killed: Killed, channel: str, parts: list[str]
) -> tuple[Move, SpanSummary]:
    """The channel's failover trace: one root, ``parts`` under it in that order, as
    long as the outage (see the module docstring); its move and root."""
    assert info.jaeger_url
    gap_s = killed.gaps[channel]
    move = next(m for _k, m in reversed(killed.view.moves) if m.channel == channel)
    assert move.reason == MoveReason.NODE_LOST and move.previous == killed.victim
    trace = await get_trace(
        info.jaeger_url, move.trace_id, operation="cluster.failover", also=tuple(parts), timeout=60
    )
    assert trace is not None, (channel, move.trace_id)
    spans = span_summaries(trace)
    roots = [s for s in spans if s.parent_id is None]
    assert [r.operation for r in roots] == ["cluster.failover"], spans
    root = roots[0]
    assert root.service == "streamwal-node"
    assert root.tags["streamwal.channel"] == channel
    assert root.tags["streamwal.cluster.reason"] == MoveReason.NODE_LOST
    assert root.tags["streamwal.cluster.from"] == killed.victim
    assert root.tags["streamwal.cluster.to"] == move.node
    by_name = {s.operation: s for s in spans}
    for name in parts:
        expected = by_name["cluster.move"].span_id if name == "wal.open" else root.span_id
        assert by_name[name].parent_id == expected, name
    starts = [by_name[name].start_us for name in parts]
    assert starts == sorted(starts), list(zip(parts, starts, strict=True))
    assert root.start_us <= starts[0]
    end_us = root.start_us + root.duration_us
    first_write = by_name["cluster.first_write"]
    # both end at the ack's ns; Jaeger rounds each span's start and duration to µs
    assert abs(first_write.start_us + first_write.duration_us - end_us) <= 1
    # the root starts at the last renewal, at most one renewal interval (TTL/3) before
    # the kill, known to etcd's whole second (and, for a lease expiry, to the
    # balancer's round); it ends at the node's ack, which the writer sees a little
    # later than the node gave it
    precision_s = float(root.tags["streamwal.cluster.last_renewal_precision_ms"]) / 1000
    duration_s = root.duration_us / 1e6
    renewal_s = killed.lease_ttl_s / 3
    print(f"{channel}: kill to first ack {gap_s:.2f}s, failover trace {duration_s:.2f}s")
    assert duration_s >= 0.8 * gap_s, (duration_s, gap_s)
    assert duration_s <= gap_s + renewal_s + precision_s, (duration_s, gap_s, precision_s)
    return move, root
