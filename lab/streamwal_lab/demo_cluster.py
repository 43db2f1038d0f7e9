"""The demo's second part (``streamwal demo --part cluster`` alone): a failover.

Three ``streamwal serve`` processes form a self-managing cluster on the local stack
(membership, an elected balancer, failover through etcd). Writers append to every
channel through :class:`~streamwal.cluster.ClusterClient`. The demo SIGKILLs the
owner of the first channel; after the lease TTL and the grace period the balancer
moves its channels, the writers follow, and the demo prints how long the channel
took no writes, the failover's trace (``cluster.failover``: from the dead owner's
last lease renewal through the evidence, the balancer's ``cluster.move`` and the new
owner's ``wal.open`` to its first acknowledged write) and its URL, then checks every
channel's log. The nodes carry the product's names (``streamwal-node``, each its own
``service.instance.id``), as deployed.

Exit status 1 (lines marked ``!!``) when the channel did not serve elsewhere within
TTL + grace + 2 s or the checker found a violation; a missing trace is a WARNING.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamwal.cluster.records import Move, MoveReason
from streamwal.node.config import load_config
from streamwal.node.telemetry import CLIENT_SERVICE, setup_telemetry
from streamwal.node.trace.jaeger import search_traces
from streamwal.node.trace.query import get_trace, span_summaries
from streamwal.node.tracing import routed_to
from streamwal.verify.cli import verify_channel
from streamwal_lab.bench.cluster_run import ChannelWriter, LocalCluster
from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.demo_common import delete_demo_topics, say, stack_up, trace_link, warn, waterfall
from streamwal_lab.stack.jaeger_ui import ui_is_real

__all__ = ["cluster_demo"]

_TTL_S = 3
_GRACE_S = 2.0


async def cluster_demo() -> int:
    info, traced = await stack_up()
    target = BenchTarget(info.pulsar_url, info.etcd_endpoint, info.pulsar_admin_url)
    run = f"{time.time_ns() % 10**8:08d}"
    channels = [f"demo-cluster-{run}-{i}" for i in range(4)]
    env: dict[str, str] = {}
    if traced and info.otlp_endpoint:
        env["STREAMWAL_TELEMETRY__OTLP_ENDPOINT"] = info.otlp_endpoint
    workdir = Path(tempfile.mkdtemp(prefix="streamwal-demo-cluster-"))
    cluster = LocalCluster(
        target, workdir, channels, lease_ttl_s=_TTL_S, grace_s=_GRACE_S, extra_env=env
    )
    bound = _TTL_S + _GRACE_S + 2.0
    with _client_traces(info.otlp_endpoint if traced else None):
        code, move, took, writers, started_us = await _fail_over(cluster, channels, workdir, bound)
    say("== every channel's log against what the writers were told")
    for channel, writer in writers.items():
        report = await verify_channel(
            info.pulsar_url, channel, acks=writer.acks, failures=writer.failures
        )
        say(f"   {channel}: {len(writer.acks)} acknowledged, {report.violations_total} violations")
        if not report.ok:
            say(f"!! {report.summary()}")
            code = 1
    if traced and info.jaeger_url:
        await _show_failover(info.jaeger_url, move.trace_id, took)
        await _show_waits(info.jaeger_url, move.trace_id, started_us)
    else:
        warn("no Jaeger to show the failover's trace in")
    await delete_demo_topics(info, channels)
    if code == 0:  # the nodes' logs explain a failure; after a success they go
        shutil.rmtree(workdir, ignore_errors=True)
    return code


async def _show_waits(jaeger_url: str, trace_id: str, since_us: int) -> None:
    """The writers' produces that waited across the failover, found by its trace id."""
    traces: list[dict[str, Any]] = []
    for _ in range(20):  # the collector forwards in batches
        traces = await search_traces(
            jaeger_url,
            [CLIENT_SERVICE],
            "cluster.follow",
            start_us=since_us - 60_000_000,
            end_us=time.time_ns() // 1000 + 60_000_000,
            tags={"streamwal.cluster.failover_trace_id": trace_id},
        )
        if traces:
            break
        await asyncio.sleep(0.5)
    waits = [
        (str(t.get("traceID", "")), s)
        for t in traces
        for s in span_summaries(t)
        if s.operation == "cluster.follow"
        and s.tags.get("streamwal.cluster.failover_trace_id") == trace_id
    ]
    if not waits:
        warn("no produce that waited across the failover reached Jaeger")
        return
    own, longest = max(waits, key=lambda w: w[1].duration_us)
    reason = longest.tags.get("streamwal.cluster.wait_reason")
    say(
        f"   {len(waits)} produce(s) waited across it, each linked to its move; the "
        f"longest {longest.duration_us / 1e6:.2f} s ({reason}), trace {own}"
    )


async def _show_failover(jaeger_url: str, trace_id: str, took: float | None) -> None:
    say("== the failover, as Jaeger holds it: from the owner's last renewal to the first write")
    trace = await get_trace(
        jaeger_url, trace_id, operation="cluster.failover", also=("wal.open",), timeout=30
    )
    if trace is None:
        warn(f"Jaeger at {jaeger_url} does not hold trace {trace_id}")
        return
    spans = span_summaries(trace)
    decision = next((s for s in spans if s.operation == "cluster.move"), None)
    opened = next((s for s in spans if s.operation == "wal.open"), None)
    if decision is not None and opened is not None:
        ready = (opened.start_us + opened.duration_us - decision.start_us) / 1e6
        say(f"   from the balancer's decision to the new owner's open done: {ready:.2f} s")
    root = next((s for s in spans if s.operation == "cluster.failover"), None)
    if root is not None:
        say(
            f"   outage as the cluster saw it (last renewal to first write): "
            f"{root.duration_us / 1e6:.2f} s"
        )
    waterfall(trace)
    ui_real = await asyncio.to_thread(ui_is_real, jaeger_url)
    say(f"   failover trace: {trace_link(jaeger_url, trace_id, ui_real)}")
    if took is not None:
        say(f"   failover duration, kill to first acknowledged append: {took:.2f} s")


async def _fail_over(
    cluster: LocalCluster, channels: list[str], workdir: Path, bound: float
) -> tuple[int, Move, float | None, dict[str, ChannelWriter], int]:
    """Kill the first channel's owner under writers: the exit code, the channel's move,
    kill to first acknowledged append (s), the writers, and when the kill was (µs)."""
    code = 0
    async with cluster, cluster.client() as client:
        view = await cluster.wait_balanced()
        say(f"== 3 nodes run themselves (keys under {cluster.prefix}, logs in {workdir})")
        say(f"   balancer: node {view.balancer_node}, term {view.term}")
        for channel in channels:
            say(f"   {channel} -> node {view.assignments[channel].node}")
        writers = {c: ChannelWriter(client, c) for c in channels}
        for writer in writers.values():
            writer.start()
        await asyncio.sleep(2.0)
        victim = view.assignments[channels[0]].node
        say(f"== kill -9 node {victim}, the owner of {channels[0]}")
        killed_at, killed_us = time.monotonic(), time.time_ns() // 1000
        await cluster.kill(victim)
        view = await cluster.wait_for(
            "the channel serving elsewhere",
            lambda v: v.serving(channels[0]) and v.assignments[channels[0]].node != victim,
        )
        while writers[channels[0]].first_ack_after(killed_at) is None:
            if time.monotonic() - killed_at > 60:
                break
            await asyncio.sleep(0.05)
        first = writers[channels[0]].first_ack_after(killed_at)
        await asyncio.sleep(1.0)
        for writer in writers.values():
            await writer.stop()
        move = next(m for _k, m in reversed(view.moves) if m.channel == channels[0])
        took = None if first is None else first - killed_at
        say(
            f"   {channels[0]} moved to node {move.node} ({move.reason}, term {move.term}); "
            + (
                "no append was acknowledged after the kill"
                if took is None
                else f"first acknowledged append {took:.2f} s after the kill (bound {bound:g} s)"
            )
        )
        if took is None or took > bound or move.reason != MoveReason.NODE_LOST:
            say("!! the channel did not fail over as it should")
            code = 1
        for node_id in cluster.node_ids:  # flush the survivors' exporters
            if node_id != victim:
                await cluster.stop(node_id)
    return code, move, took, writers, killed_us


@contextlib.contextmanager
def _client_traces(otlp_endpoint: str | None) -> Iterator[None]:
    """The writers' spans (a produce that waited across the failover) go to the stack,
    as ``streamwal-client``: what a deployed client's would show."""
    if not otlp_endpoint:
        yield
        return
    config = load_config(
        environ={
            **os.environ,
            "STREAMWAL_TELEMETRY__OTLP_ENDPOINT": otlp_endpoint,
            "STREAMWAL_NODE__METRICS_LISTEN": "",
        }
    )
    telemetry = setup_telemetry(config, one_node=False, service=CLIENT_SERVICE)
    try:
        # routed: the demo's first part, in this process, may have set the global one
        with routed_to(telemetry.tracer_provider):
            yield
    finally:
        telemetry.shutdown()
