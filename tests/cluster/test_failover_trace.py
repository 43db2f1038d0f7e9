"""A failover reads whole in Jaeger: after a real kill -9 of an owner in a 3-node
cluster, its channel's failover is one trace whose root, ``cluster.failover``, spans the
outage (the old owner's last lease renewal to the first acknowledged write on the new
owner) and whose parts come in the order they happened."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from streamwal.cluster import ClusterClient, ClusterSettings, waits
from streamwal.cluster.records import MoveReason
from streamwal.cluster.view import ClusterView
from streamwal.node.trace.query import get_trace, span_summaries
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster, Writer, owners
from tests.cluster.spans import capture_module_spans

pytestmark = pytest.mark.integration

_DEFAULTS = ClusterSettings()
#: etcd counts a lease's time in whole seconds: the last renewal is known to that
_ETCD_PRECISION_S = 1.0


async def test_a_killed_owners_failover_is_one_trace_spanning_the_outage(
    telemetry_stack: StackInfo,
    tmp_path: Path,
    etcd_prefix: Callable[[str], str],
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = telemetry_stack
    # the writers' spans (this process's), kept here rather than exported
    client_spans = capture_module_spans(monkeypatch, waits)[1]
    assert info.otlp_endpoint and info.jaeger_url
    channels = [f"fot-{unique}-{i}" for i in range(3)]
    cluster = TestCluster(
        info,
        tmp_path,
        etcd_prefix("fot"),
        channels,
        lease_ttl_s=_DEFAULTS.lease_ttl_s,
        grace_period_s=_DEFAULTS.grace_period_s,
        round_interval_s=_DEFAULTS.round_interval_s,
        poll_interval_s=_DEFAULTS.poll_interval_s,
    )
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
                victim = view.assignments[channels[0]].node
                moved = [c for c, node in owners(view).items() if node == victim]
                killed_at = time.monotonic()
                await cluster.nodes[victim].kill()

                def moved_off(v: ClusterView) -> bool:
                    return all(v.serving(c) and v.assignments[c].node != victim for c in moved)

                view = await cluster.wait_for("the victim's channels elsewhere", moved_off, 30)
                await asyncio.sleep(1.0)
                gaps = {c: writers[c].first_ack_after(killed_at) for c in moved}
            finally:
                for writer in writers.values():
                    await writer.stop()
        for node, process in cluster.nodes.items():
            if node != victim:
                assert await process.terminate() == 0  # flushes the exporters
    finally:
        await cluster.close()
    ttl_s = float(_DEFAULTS.lease_ttl_s)
    for channel in moved:
        first = gaps[channel]
        assert first is not None, channel
        gap_s = first - killed_at
        move = next(m for _k, m in reversed(view.moves) if m.channel == channel)
        assert move.reason == MoveReason.NODE_LOST and move.previous == victim
        trace = await get_trace(
            info.jaeger_url,
            move.trace_id,
            operation="cluster.failover",
            also=("cluster.evidence", "cluster.move", "wal.open", "cluster.first_write"),
            timeout=60,
        )
        assert trace is not None, (channel, move.trace_id)
        spans = span_summaries(trace)
        roots = [s for s in spans if s.parent_id is None]
        assert [r.operation for r in roots] == ["cluster.failover"], spans
        root = roots[0]
        assert root.service == "streamwal-node"
        assert root.tags["streamwal.channel"] == channel
        assert root.tags["streamwal.cluster.reason"] == MoveReason.NODE_LOST
        assert root.tags["streamwal.cluster.from"] == victim
        assert root.tags["streamwal.cluster.to"] == move.node
        assert root.tags["streamwal.cluster.evidence"].startswith("connection-refused")
        assert root.tags["streamwal.cluster.last_renewal_precision_ms"] == 1000
        by_name = {s.operation: s for s in spans}
        parts = ["cluster.evidence", "cluster.move", "wal.open", "cluster.first_write"]
        for name in ("cluster.evidence", "cluster.move", "cluster.first_write"):
            assert by_name[name].parent_id == root.span_id, name
        assert by_name["wal.open"].parent_id == by_name["cluster.move"].span_id
        starts = [by_name[name].start_us for name in parts]
        assert starts == sorted(starts), list(zip(parts, starts, strict=True))
        assert root.start_us <= starts[0]
        end_us = root.start_us + root.duration_us
        first_write = by_name["cluster.first_write"]
        # both end at the ack's ns; Jaeger rounds each span's start and duration to µs
        assert abs(first_write.start_us + first_write.duration_us - end_us) <= 1
        # the root starts at the last renewal, at most one renewal interval (TTL/3)
        # before the kill, known to etcd's whole second; it ends at the node's ack,
        # which the writer sees a little later than the node gave it
        duration_s = root.duration_us / 1e6
        print(f"{channel}: kill to first ack {gap_s:.2f}s, failover trace {duration_s:.2f}s")
        assert duration_s >= 0.8 * gap_s, (duration_s, gap_s)
        assert duration_s <= gap_s + ttl_s / 3 + _ETCD_PRECISION_S, (duration_s, gap_s)
        # ``streamwal trace failovers`` finds it by its tag and lists its parts in order
        args = ("--channel", channel, "--since", "10m", "--jaeger", info.jaeger_url)
        listed = json.loads(await _trace_cli("failovers", *args, "--json"))
        assert [f["trace_id"] for f in listed] == [move.trace_id], listed
        assert listed[0]["outage_us"] == root.duration_us
        assert (listed[0]["from_node"], listed[0]["to_node"]) == (victim, move.node)
        assert listed[0]["url"].endswith(f"/trace/{move.trace_id}")
        named = [p["operation"] for p in listed[0]["parts"]]
        assert [n for n in named if n in parts] == parts, named
        text = await _trace_cli("failovers", *args)
        assert channel in text and move.trace_id in text and "connection-refused" in text
        # the writer's produce that waited across the failover: why, how long, linked
        follows = [
            s
            for s in client_spans.get_finished_spans()
            if s.name == "cluster.follow"
            and s.attributes is not None
            and s.attributes["streamwal.channel"] == channel
            and s.attributes.get("streamwal.cluster.failover_trace_id") == move.trace_id
        ]
        assert follows, client_spans.get_finished_spans()
        longest = max(follows, key=_waited_ms)
        tags = longest.attributes
        assert tags is not None
        assert tags["streamwal.cluster.wait_reason"] in (waits.OWNER_GONE, waits.MOVED)
        assert _waited_ms(longest) >= 0.5 * gap_s * 1000, (tags, gap_s)
        assert tags["streamwal.cluster.to"] == move.node
        linked = {format(link.context.trace_id, "032x") for link in longest.links}
        assert linked == {move.trace_id}, longest.links


def _waited_ms(span: ReadableSpan) -> int:
    waited = (span.attributes or {}).get("streamwal.cluster.waited_ms")
    assert isinstance(waited, int), span.attributes
    return waited


async def _trace_cli(*args: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "streamwal.cli", "trace", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout
