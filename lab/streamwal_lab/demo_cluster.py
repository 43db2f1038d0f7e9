"""The demo's second part (``streamwal demo --part cluster`` alone): a failover.

Three ``streamwal serve`` processes form a self-managing cluster on the local stack
(membership, an elected balancer, failover through etcd). Writers append to every
channel through :class:`~streamwal.cluster.ClusterClient`. The demo SIGKILLs the
owner of the first channel; after the lease TTL and the grace period the balancer
moves its channels, the writers follow, and the demo prints how long the channel
took no writes, the failover's trace (the balancer's ``cluster.move`` span with the
new owner's ``wal.open`` inside it) and its URL, then checks every channel's log.

Exit status 1 (lines marked ``!!``) when the channel did not serve elsewhere within
TTL + grace + 2 s or the checker found a violation; a missing trace is a WARNING.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from streamwal.cluster.records import MoveReason
from streamwal.node.trace.query import get_trace, span_summaries
from streamwal.verify.cli import verify_channel
from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.cluster_run import ChannelWriter, LocalCluster
from streamwal_lab.demo import _link, _stack, _waterfall, delete_demo_topics, say, warn
from streamwal_lab.stack.jaeger_ui import ui_is_real

__all__ = ["cluster_demo"]

_SERVICE = "streamwal-cluster-demo"
_TTL_S = 3
_GRACE_S = 2.0


async def cluster_demo() -> int:
    info, traced = await _stack()
    target = BenchTarget(info.pulsar_url, info.etcd_endpoint, info.pulsar_admin_url)
    run = f"{time.time_ns() % 10**8:08d}"
    channels = [f"demo-cluster-{run}-{i}" for i in range(4)]
    env = {"STREAMWAL_TELEMETRY__SERVICE_NAME": _SERVICE}
    if traced and info.otlp_endpoint:
        env["STREAMWAL_TELEMETRY__OTLP_ENDPOINT"] = info.otlp_endpoint
    workdir = Path(tempfile.mkdtemp(prefix="streamwal-demo-cluster-"))
    cluster = LocalCluster(
        target, workdir, channels, lease_ttl_s=_TTL_S, grace_s=_GRACE_S, extra_env=env
    )
    bound = _TTL_S + _GRACE_S + 2.0
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
        killed_at = time.monotonic()
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
    else:
        warn("no Jaeger to show the failover's trace in")
    await delete_demo_topics(info, channels)
    if code == 0:  # the nodes' logs explain a failure; after a success they go
        shutil.rmtree(workdir, ignore_errors=True)
    return code


async def _show_failover(jaeger_url: str, trace_id: str, took: float | None) -> None:
    say("== the failover, as Jaeger holds it: why the channel moved, and its new open")
    trace = await get_trace(jaeger_url, trace_id, operation="wal.open", timeout=30)
    if trace is None:
        warn(f"Jaeger at {jaeger_url} does not hold trace {trace_id}")
        return
    spans = span_summaries(trace)
    decision = next((s for s in spans if s.operation == "cluster.move"), None)
    opened = next((s for s in spans if s.operation == "wal.open"), None)
    if decision is not None and opened is not None:
        ready = (opened.start_us + opened.duration_us - decision.start_us) / 1e6
        say(f"   from the balancer's decision to the new owner's open done: {ready:.2f} s")
    _waterfall(trace)
    ui_real = await asyncio.to_thread(ui_is_real, jaeger_url)
    say(f"   failover trace: {_link(jaeger_url, trace_id, ui_real)}")
    if took is not None:
        say(f"   failover duration, kill to first acknowledged append: {took:.2f} s")
