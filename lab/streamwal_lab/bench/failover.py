"""``streamwal bench failover``: a self-managing cluster losing nodes under writes.

Three (``--nodes``) node processes share the channels; writers append to every
channel through :class:`~streamwal.cluster.ClusterClient`. Each round kills (SIGKILL)
the owner of one channel and measures, for every channel it owned, the time from the
kill to that channel's first acknowledged append on its new owner; the node is then
started again and the cluster rebalances before the next kill. Then every node is
restarted in turn (SIGTERM, start, balanced) and the longest time without an
acknowledgement on each channel is the rolling restart's write gap. Last, the history
checker reads every channel's log against what the writers were told.

Two profiles run one after the other on the same machine: ``defaults`` (the product's
own lease, grace and rounds; its bound is 5 s for every kill: a killed node is found by
its refused port, not by its lease) and ``tuned`` (a short lease and grace, fast
rounds; bound TTL + grace + 2 s, as before the evidence existed).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from streamwal.verify.cli import verify_channel
from streamwal_lab.bench.cluster_run import ChannelWriter, LocalCluster
from streamwal_lab.bench.stats import distribution
from streamwal_lab.bench.target import CLIENT_LOG, BenchTarget, new_run

__all__ = ["run_failover_bench"]

_FIRST_APPEND_TIMEOUT_S = 60.0


#: with the defaults, every kill's channels take writes again within this
DEFAULTS_BOUND_S = 5.0
PROFILES = ("defaults", "tuned")


async def run_failover_bench(
    target: BenchTarget,
    *,
    nodes: int = 3,
    channels: int = 6,
    kills: int = 20,
    lease_ttl_s: int = 2,
    grace_s: float = 1.0,
    rolling: bool = True,
    profiles: tuple[str, ...] = PROFILES,
) -> dict[str, Any]:
    """Each profile of ``profiles`` in turn; ``lease_ttl_s`` and ``grace_s`` are the
    tuned profile's."""
    results: dict[str, Any] = {}
    for profile in profiles:
        target.progress(f"failover: profile {profile}")
        results[profile] = await _run_profile(
            target,
            nodes=nodes,
            channels=channels,
            kills=kills,
            lease_ttl_s=lease_ttl_s,
            grace_s=grace_s,
            rolling=rolling,
            defaults=profile == "defaults",
        )
    return {"nodes": nodes, "channels": channels, "kills": kills, "profiles": results}


async def _run_profile(
    target: BenchTarget,
    *,
    nodes: int,
    channels: int,
    kills: int,
    lease_ttl_s: int,
    grace_s: float,
    rolling: bool,
    defaults: bool,
) -> dict[str, Any]:
    run = new_run()
    names = [f"bench-failover-{run}-{i}" for i in range(channels)]
    workdir = Path(CLIENT_LOG).parent / f"failover-{run}"
    workdir.mkdir(parents=True, exist_ok=True)
    samples: list[float] = []
    cluster = LocalCluster(
        target,
        workdir,
        names,
        nodes=nodes,
        lease_ttl_s=lease_ttl_s,
        grace_s=grace_s,
        defaults=defaults,
    )
    async with cluster, cluster.client() as client:
        target.progress(f"failover: {nodes} nodes, {channels} channels, logs in {workdir}")
        await cluster.wait_balanced()
        writers = {c: ChannelWriter(client, c) for c in names}
        for writer in writers.values():
            writer.start()
        try:
            for kill in range(kills):
                samples += await _kill_one(cluster, writers, names[kill % channels])
                target.progress(
                    f"failover: kill {kill + 1}/{kills}: worst so far {max(samples):.2f} s"
                )
            gaps = await _rolling_restart(cluster, writers) if rolling else {}
        finally:
            for writer in writers.values():
                await writer.stop()
    violations = 0
    by_rule: dict[str, int] = {}
    for channel, writer in writers.items():
        report = await verify_channel(
            target.pulsar_url, channel, acks=writer.acks, failures=writer.failures
        )
        violations += report.violations_total
        for rule, count in report.by_rule().items():
            by_rule[rule] = by_rule.get(rule, 0) + count
        if not report.ok:
            target.progress(f"failover: {channel}: {report.summary()}")
    bound_s = DEFAULTS_BOUND_S if defaults else cluster.lease_ttl_s + cluster.grace_s + 2.0
    return {
        "lease_ttl_s": cluster.lease_ttl_s,
        "grace_s": cluster.grace_s,
        "bound_s": bound_s,
        "kill_to_first_append": distribution(samples),
        "within_bound": sum(1 for s in samples if s <= bound_s),
        "rolling_restart_gap": distribution(list(gaps.values())),
        "acks": sum(len(w.acks) for w in writers.values()),
        "unknown_outcomes": sum(
            1 for w in writers.values() for f in w.failures if f.outcome == "unknown"
        ),
        "history_violations": violations,
        "violations_by_rule": by_rule,
    }


async def _kill_one(
    cluster: LocalCluster, writers: dict[str, ChannelWriter], channel: str
) -> list[float]:
    view = await cluster.wait_balanced()
    victim = view.assignments[channel].node
    moved = [c for c, a in view.assignments.items() if a.node == victim]
    killed_at = time.monotonic()
    await cluster.kill(victim)
    deadline = killed_at + _FIRST_APPEND_TIMEOUT_S
    while any(writers[c].first_ack_after(killed_at) is None for c in moved):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"channels of node {victim} took no append in {_FIRST_APPEND_TIMEOUT_S:g}s"
            )
        await asyncio.sleep(0.05)
    firsts = [writers[c].first_ack_after(killed_at) for c in moved]
    await cluster.wait_for(f"node {victim} gone", lambda v: victim not in v.nodes)
    await cluster.start(victim)
    return [first - killed_at for first in firsts if first is not None]


async def _rolling_restart(
    cluster: LocalCluster, writers: dict[str, ChannelWriter]
) -> dict[str, float]:
    began = time.monotonic()
    for node_id in cluster.node_ids:
        await cluster.wait_balanced()
        await cluster.stop(node_id)
        await cluster.start(node_id)
    await cluster.wait_balanced()
    ended = time.monotonic()
    return {c: w.max_gap(began, ended) for c, w in writers.items()}
