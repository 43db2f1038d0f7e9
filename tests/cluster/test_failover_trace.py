"""A failover reads whole in Jaeger: after a real kill -9 of an owner in a 3-node
cluster, its channel's failover is one trace whose root, ``cluster.failover``, spans the
outage (the old owner's last lease renewal to the first acknowledged write on the new
owner) and whose parts come in the order they happened: found by refused connections,
and, with the probes off, by the lease running out (its waits then parts of it).

The trace's length is bound by the gap the writers measure (kill to first acknowledged
write): at least 0.8 of it, at most the gap plus one renewal interval (TTL/3: the kill
came at most that long after the last renewal) plus the precision the root says its
start is known to (etcd's whole second; for a lease expiry also the balancer's round)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from streamwal.cluster import ClusterClient, ClusterSettings, waits
from streamwal.cluster.records import Move, MoveReason
from streamwal.cluster.view import ClusterView
from streamwal.node.trace.query import SpanSummary, get_trace, span_summaries
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import LEASE_TTL_S, TestCluster, Writer, owners
from tests.cluster.spans import capture_module_spans

pytestmark = pytest.mark.integration

_DEFAULTS = ClusterSettings()
#: the cluster's default times, as a deployment runs them
_DEFAULT_TIMES: dict[str, Any] = {
    "lease_ttl_s": _DEFAULTS.lease_ttl_s,
    "grace_period_s": _DEFAULTS.grace_period_s,
    "round_interval_s": _DEFAULTS.round_interval_s,
    "poll_interval_s": _DEFAULTS.poll_interval_s,
}


@dataclass(frozen=True)
class _Killed:
    victim: int
    lease_ttl_s: float
    #: the moved channels' kill to first acknowledged write (s)
    gaps: dict[str, float]
    view: ClusterView


async def _kill_an_owner(
    info: StackInfo, tmp_path: Path, prefix: str, channels: list[str], **settings: Any
) -> _Killed:
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
    return _Killed(victim, float(settings.get("lease_ttl_s", LEASE_TTL_S)), gaps, view)


async def _failover_trace(
    info: StackInfo, killed: _Killed, channel: str, parts: list[str]
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


async def test_a_killed_owners_failover_is_one_trace_spanning_the_outage(
    telemetry_stack: StackInfo,
    tmp_path: Path,
    etcd_prefix: Callable[[str], str],
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = telemetry_stack
    assert info.otlp_endpoint and info.jaeger_url
    # the writers' spans (this process's), kept here rather than exported
    client_spans = capture_module_spans(monkeypatch, waits)[1]
    channels = [f"fot-{unique}-{i}" for i in range(3)]
    killed = await _kill_an_owner(info, tmp_path, etcd_prefix("fot"), channels, **_DEFAULT_TIMES)
    parts = ["cluster.evidence", "cluster.move", "wal.open", "cluster.first_write"]
    for channel, gap_s in killed.gaps.items():
        move, root = await _failover_trace(info, killed, channel, parts)
        assert root.tags["streamwal.cluster.evidence"].startswith("connection-refused")
        assert root.tags["streamwal.cluster.last_renewal_precision_ms"] == 1000
        # ``streamwal trace failovers`` finds it by its tag and lists its parts in order
        args = ("--channel", channel, "--since", "10m", "--jaeger", info.jaeger_url)
        listed = json.loads(await _trace_cli("failovers", *args, "--json"))
        assert [f["trace_id"] for f in listed] == [move.trace_id], listed
        assert listed[0]["outage_us"] == root.duration_us
        assert (listed[0]["from_node"], listed[0]["to_node"]) == (killed.victim, move.node)
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


async def test_a_lease_expiry_failover_shows_the_lease_and_the_grace_it_waited(
    telemetry_stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str], unique: str
) -> None:
    info = telemetry_stack
    assert info.otlp_endpoint and info.jaeger_url
    channels = [f"fol-{unique}-{i}" for i in range(3)]
    # no probes: the lease alone tells the node is gone (the default TTL and grace: the
    # lease runs out well after the kill, whatever the moment of the last renewal)
    times = {**_DEFAULT_TIMES, "probe_refusals": 0}
    killed = await _kill_an_owner(info, tmp_path, etcd_prefix("fol"), channels, **times)
    parts = [
        "cluster.wait.lease",
        "cluster.evidence",
        "cluster.wait.grace",
        "cluster.move",
        "wal.open",
        "cluster.first_write",
    ]
    for channel in killed.gaps:
        _move, root = await _failover_trace(info, killed, channel, parts)
        assert root.tags["streamwal.cluster.evidence"] == "lease-expired"
        # etcd's second and the balancer's round
        assert root.tags["streamwal.cluster.last_renewal_precision_ms"] == 1000 + int(
            _DEFAULTS.round_interval_s * 1000
        )


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
