"""A self-managing cluster under faults: writers follow their channels through
:class:`~streamwal.cluster.ClusterClient` while nodes die, lose etcd, or etcd restarts.

``cluster-kill-9``: with the product's default cluster and TSO settings, each round
SIGKILLs the owner of a random channel; a peer finds its port refusing connections,
declares it lost and revokes its lease, and the balancer moves its channels without
the grace period; the figure is the time from the kill to the first acknowledged
append on the new owner (bound: 5 s).

``cluster-pause``: with the defaults, each round SIGSTOPs the owner of a channel for
3 s, then SIGCONTs it: a slow node is not a dead one, so nothing moves, no node is
declared lost, and its channels take writes again once it runs.

``cluster-zombie`` (the defaults too): each round blackholes one node's etcd traffic
only (a fault proxy sits on its etcd link; its broker link stays up, its port stays
open: no evidence of death). Its lease expires, its channels are moved after the
grace, and until the new owner's open fences it the node keeps appending: every
acknowledged append must be in the log, time ticks ordered across both owners. Then
the link heals and the node registers again.

``cluster-broker-lost``: node 4 starts with a wrong broker address (it must stay not
ready and get nothing), and each round cuts node 3's broker link (a fault proxy,
refusing or blackholing in turn) while writers keep going: node 3 turns not ready
after ``node.broker_lost_after_s``, its channels serve on the others within the bound,
and once the link heals it is ready again and takes channels back in steps.

``cluster-etcd-restart``: the cluster's own etcd is killed for less than the lease
TTL and restarted; etcd renews leases on restart, so no node is seen lost and no
channel moves, and appends resume.

Every scenario ends with two rules of the cluster's moves: each channel that moved
away from a node still live was released by it after the move (the new owner fences
only then, or once ``grace_period_s`` ran out: those fences are counted), and the
broker's health check answers ``ok`` (a fence that meets the old owner's close can
deadlock it: docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.cluster import ClusterClient, ClusterSettings
from streamwal.cluster.records import ClusterKeys, MoveReason
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.verify.cli import verify_channel
from streamwal_lab.bench.cluster_run import ChannelWriter, balanced, wait_for_view
from streamwal_lab.chaos.env import ChaosEnv, node_settings
from streamwal_lab.chaos.nodes import NodeProcess, free_port
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import start_all
from streamwal_lab.faultproxy import FaultProxy

__all__ = ["run_broker_lost", "run_etcd_restart", "run_kill", "run_pause", "run_zombie"]

_TTL_S = 2
_GRACE_S = 1.0
#: with the defaults, every kill's channels take writes again within this
_DEFAULTS_BOUND_S = 5.0
#: how long a paused node stays stopped: less than the default lease, more than a blip
_PAUSE_S = 3.0
#: node.broker_lost_after_s of the node whose broker link is cut
_LOST_AFTER_S = 3.0


class _Cluster:
    def __init__(
        self,
        env: ChaosEnv,
        etcd_endpoint: str,
        channels: int,
        ttl_s: int,
        *,
        defaults: bool = False,
    ) -> None:
        """``defaults``: the nodes run the product's own cluster and TSO settings
        (``ttl_s`` then is only what the scenario expects the lease to be)."""
        self.env = env
        self.defaults = defaults
        self.etcd_endpoint = etcd_endpoint
        self.prefix = "/" + env.name("cluster")
        self.keys = ClusterKeys(self.prefix)
        self.channels = [env.name(f"cl{i}") for i in range(channels)]
        self.ttl_s = ttl_s
        self.store = ClusterStore([etcd_endpoint], unavailable_after_s=10.0)
        self.nodes: dict[int, NodeProcess] = {}
        self.writers: list[ChannelWriter] = []

    def client(self) -> ClusterClient:
        """A client of this cluster: its etcd and its key prefix."""
        return ClusterClient([self.etcd_endpoint], key_prefix=self.prefix)

    def add(
        self,
        node_id: int,
        etcd_endpoint: str | None = None,
        *,
        pulsar_url: str | None = None,
        admin_url: str | None = None,
        node: dict[str, Any] | None = None,
    ) -> NodeProcess:
        """Node ``node_id``'s process; ``pulsar_url``/``admin_url``: its broker's, when
        not the run's (``admin_url`` ``None`` then: a broker the node never reaches)."""
        tso: dict[str, Any] = {"mode": "in-process", "key_prefix": self.prefix}
        cluster: dict[str, Any] = {
            "enabled": True,
            "key_prefix": self.prefix,
            "channels": self.channels,
        }
        if not self.defaults:
            tso["lease_ttl_s"] = 2
            cluster |= {
                "lease_ttl_s": self.ttl_s,
                "grace_period_s": _GRACE_S,
                "round_interval_s": 0.2,
                "poll_interval_s": 0.2,
            }
        settings = node_settings(
            pulsar_url or self.env.pulsar_url,
            etcd_endpoint or self.etcd_endpoint,
            tso,
            cluster=cluster,
            node=node or {},
            pulsar={} if pulsar_url is None else {"admin_url": admin_url},
        )
        process = self.nodes[node_id] = self.env.node(node_id, settings)
        return process

    async def start(self, count: int) -> None:
        """Nodes 1 to ``count``: node 1 first, so that it registers first and balances,
        then the others side by side (each start is a process's imports and a lease:
        seconds on a busy machine, which one after the other only add up)."""
        await self.store.start()
        nodes = [self.nodes.get(i) or self.add(i) for i in range(1, count + 1)]
        await nodes[0].start()
        await start_all(nodes[1:])

    async def wait(self, what: str, check: Any, timeout: float = 90.0) -> ClusterView:
        return await wait_for_view(self.store, self.keys, what, check, timeout)

    async def balanced(self) -> ClusterView:
        return await self.wait("balanced", lambda v: balanced(v, self.channels))

    @contextlib.asynccontextmanager
    async def writing(
        self, count: int = 3, *, balanced_first: bool = False
    ) -> AsyncIterator[dict[str, ChannelWriter]]:
        """Nodes 1 to ``count`` started (:meth:`start`) and a client's writer on every
        channel (:meth:`write`), the scenario's rounds run inside; ``balanced_first``:
        the writes begin once the channels are spread, not while they are placed.
        Leaving it closes the cluster (:meth:`close`), however the rounds ended."""
        try:
            await self.start(count)
            if balanced_first:
                await self.balanced()
            async with self.client() as client:
                yield self.write(client)
        finally:
            await self.close()

    def write(self, client: ClusterClient) -> dict[str, ChannelWriter]:
        writers = {c: ChannelWriter(client, c, pause_s=0.02) for c in self.channels}
        for writer in writers.values():
            writer.start()
        self.writers = list(writers.values())
        return writers

    async def check(self, result: ScenarioResult) -> None:
        for writer in self.writers:
            await writer.stop()
        for writer in self.writers:
            result.expect(bool(writer.acks), f"{writer.channel}: no append was acknowledged")
            report = await verify_channel(
                self.env.pulsar_url, writer.channel, acks=writer.acks, failures=writer.failures
            )
            result.absorb(writer.channel, report)
        await self._check_releases(result)
        await self._check_broker(result)
        # fences that waited out the grace for a live old owner: allowed, but each is
        # a fence that may meet that owner's close
        result.figures["fences without the old owner's release"] = sum(
            node.log_text().count("has not released channel") for node in self.nodes.values()
        )

    async def _check_releases(self, result: ScenarioResult, within_s: float = 5.0) -> None:
        """Each channel moved away from a node that is live now was released by it
        after the move; a node closing a channel it lost takes a poll or two."""
        deadline = time.monotonic() + within_s
        while True:
            view = await read_view(self.store, self.keys)
            unreleased = [c for c in self.channels if not view.released(c)]
            if not unreleased or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        for channel in unreleased:
            previous = view.assignments[channel].previous
            result.expect(
                False,
                f"{channel}: moved from live node {previous}, which did not release it "
                f"within {within_s:g}s",
            )

    async def _check_broker(self, result: ScenarioResult, within_s: float = 45.0) -> None:
        """The broker's health check answers ``ok``, asked again for ``within_s`` (a
        loaded machine may miss one heartbeat; a deadlocked broker never answers)."""
        admin_url = self.env.broker_admin_url
        if admin_url is None:
            return
        deadline = time.monotonic() + within_s
        while True:
            try:
                answer = await PulsarAdmin(admin_url, timeout=15).get("brokers/health")
            except Exception as exc:
                answer = f"{type(exc).__name__}: {exc}"
            if answer == "ok" or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        result.expect(
            answer == "ok",
            f"the broker's health check answered {str(answer)[:300]!r} after the moves "
            "(a fence meeting a close can deadlock it: docs/reliability.md)",
        )

    async def close(self) -> None:
        for writer in self.writers:
            await writer.stop()
        await self.store.close()


def _moved_off(view: ClusterView, node: int, channels: Sequence[str]) -> bool:
    return all(view.serving(c) and view.assignments[c].node != node for c in channels)


async def run_kill(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("cluster-kill-9")
    cluster = _Cluster(env, env.etcd_endpoint, 4, ClusterSettings.lease_ttl_s, defaults=True)
    failovers: list[float] = []
    declared = 0
    async with cluster.writing(balanced_first=True) as writers:
        for round_ in range(rounds):
            view = await cluster.balanced()
            victim = view.assignments[env.rng.choice(cluster.channels)].node
            moved = [c for c, a in view.assignments.items() if a.node == victim]
            await asyncio.sleep(env.rng.uniform(0.2, 1.0))
            killed_at = time.monotonic()
            await cluster.nodes[victim].kill()
            result.faults += 1
            await cluster.wait(
                f"round {round_}: moved", lambda v, n=victim, m=moved: _moved_off(v, n, m)
            )
            firsts = await _first_acks_after(writers, moved, killed_at, result, round_)
            failovers += [f - killed_at for f in firsts]
            view = await cluster.wait("lease gone", lambda v, n=victim: n not in v.nodes)
            evidence = view.lost.get(victim)
            declared += evidence is not None
            result.expect(
                evidence is not None, f"round {round_}: node {victim} was not declared lost"
            )
            await cluster.nodes[victim].start()
            result.rounds += 1
        await cluster.balanced()
        await cluster.check(result)
    worst = max(failovers, default=0.0)
    result.figures["kill to first append, max (s)"] = round(worst, 2)
    result.figures["kills found by a refused port"] = declared
    result.expect(
        worst <= _DEFAULTS_BOUND_S, f"a failover took {worst:.2f}s, above {_DEFAULTS_BOUND_S:g}s"
    )
    return result


async def run_pause(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("cluster-pause")
    cluster = _Cluster(env, env.etcd_endpoint, 4, ClusterSettings.lease_ttl_s, defaults=True)
    stalls: list[float] = []
    async with cluster.writing() as writers:
        for round_ in range(rounds):
            view = await cluster.balanced()
            victim = view.assignments[env.rng.choice(cluster.channels)].node
            held = {c: a.node for c, a in view.assignments.items()}
            moves = len(view.moves)
            await asyncio.sleep(env.rng.uniform(0.2, 1.0))
            cluster.nodes[victim].pause()
            result.faults += 1
            await asyncio.sleep(_PAUSE_S)
            resumed_at = time.monotonic()
            cluster.nodes[victim].resume()
            mine = [c for c, n in held.items() if n == victim]
            firsts = await _first_acks_after(writers, mine, resumed_at, result, round_)
            stalls += [f - resumed_at for f in firsts]
            # a round and a poll more: a move decided late would show now
            await asyncio.sleep(2.0)
            view = await read_view(cluster.store, cluster.keys)
            moved = {c for c, a in view.assignments.items() if held.get(c) != a.node}
            result.expect(
                not moved and len(view.moves) == moves,
                f"round {round_}: node {victim} paused {_PAUSE_S:g}s and lost {sorted(moved)}",
            )
            result.expect(
                victim in view.nodes and victim not in view.lost,
                f"round {round_}: the paused node {victim} was taken for dead",
            )
            result.rounds += 1
        await cluster.check(result)
    result.figures["resume to first append, max (s)"] = round(max(stalls, default=0.0), 2)
    return result


async def run_zombie(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("cluster-zombie")
    cluster = _Cluster(env, env.etcd_endpoint, 4, ClusterSettings.lease_ttl_s, defaults=True)
    etcd_port = int(env.etcd_endpoint.rsplit(":", 1)[1])
    zombie_acks = 0
    async with FaultProxy(etcd_port) as proxy:
        cluster.add(2, etcd_endpoint=proxy.url_host)
        async with cluster.writing() as writers:
            for round_ in range(rounds):
                view = await cluster.balanced()
                held = [c for c, a in view.assignments.items() if a.node == 2]
                if not held:
                    result.problems.append(f"round {round_}: node 2 owns no channel")
                    continue
                cut_at = time.monotonic()
                proxy.set_mode("blackhole")
                result.faults += 1
                view = await cluster.wait(
                    f"round {round_}: node 2's channels moved",
                    lambda v, h=held: _moved_off(v, 2, h),
                )
                moved_at = time.monotonic()
                # appends the cut-off node acknowledged after its lease had expired
                zombie_acks += sum(
                    1
                    for c in held
                    for t in writers[c].ack_times
                    if cut_at + cluster.ttl_s < t < moved_at
                )
                lost = [m for _k, m in view.moves if m.previous == 2 and m.channel in held]
                result.expect(
                    bool(lost) and all(m.reason == MoveReason.NODE_LOST for m in lost),
                    f"round {round_}: moves off node 2: {[m.reason for m in lost]}",
                )
                proxy.set_mode("pass")
                await cluster.wait(f"round {round_}: node 2 back", lambda v: 2 in v.nodes)
                result.rounds += 1
            await cluster.balanced()
            await cluster.check(result)
    result.figures["acks on the cut-off node after its lease expired"] = zombie_acks
    return result


async def run_broker_lost(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("cluster-broker-lost")
    cluster = _Cluster(env, env.etcd_endpoint, 4, _TTL_S)
    broker_port = int(env.pulsar_url.rsplit(":", 1)[1])
    moved_in: list[float] = []
    try:
        async with FaultProxy(broker_port) as proxy:
            cluster.add(
                3,
                pulsar_url=f"pulsar://{proxy.url_host}",
                admin_url=env.broker_admin_url,
                node={"broker_lost_after_s": _LOST_AFTER_S},
            )
            await cluster.start(3)
            wrong = cluster.add(4, pulsar_url=f"pulsar://127.0.0.1:{free_port()}")
            await wrong.start(until=b"listening on")
            async with cluster.client() as client:
                writers = cluster.write(client)
                for round_ in range(rounds):
                    view = await cluster.balanced()
                    _wrong_node_idle(view, result, f"round {round_}")
                    held = [c for c, a in view.assignments.items() if a.node == 3]
                    if not held:
                        result.problems.append(f"round {round_}: node 3 owns no channel")
                        continue
                    await asyncio.sleep(env.rng.uniform(0.2, 1.0))
                    cut_at = time.monotonic()
                    proxy.set_mode("refuse" if round_ % 2 == 0 else "blackhole")
                    result.faults += 1
                    view = await cluster.wait(
                        f"round {round_}: node 3's channels moved",
                        lambda v, h=held: _moved_off(v, 3, h),
                    )
                    firsts = await _first_acks_after(writers, held, cut_at, result, round_)
                    moved_in += [f - cut_at for f in firsts]
                    lost = [m for _k, m in view.moves if m.previous == 3 and m.channel in held]
                    result.expect(
                        bool(lost) and all(m.reason == MoveReason.NODE_NOT_READY for m in lost),
                        f"round {round_}: moves off node 3: {[m.reason for m in lost]}",
                    )
                    result.expect(
                        3 in view.nodes and not view.nodes[3].ready,
                        f"round {round_}: node 3 is not reported not ready",
                    )
                    proxy.set_mode("pass")
                    await cluster.wait(
                        f"round {round_}: node 3 ready again",
                        lambda v: 3 in v.nodes and v.nodes[3].ready,
                    )
                    result.rounds += 1
                view = await cluster.balanced()
                _wrong_node_idle(view, result, "at the end")
                await cluster.check(result)
    finally:
        await cluster.close()
    # not ready after lost_after (checked every lost_after / 3), the grace, an open
    bound = _LOST_AFTER_S + _LOST_AFTER_S / 3 + 3.0 + _GRACE_S + 5.0
    worst = max(moved_in, default=0.0)
    result.figures["cut to first append elsewhere, max (s)"] = round(worst, 2)
    result.expect(
        worst <= bound, f"channels took {worst:.2f}s to serve elsewhere, above {bound:g}s"
    )
    return result


def _wrong_node_idle(view: ClusterView, result: ScenarioResult, when: str) -> None:
    """Node 4 (wrong broker address): registered, not ready, owning nothing."""
    record = view.nodes.get(4)
    result.expect(
        record is not None and not record.ready,
        f"{when}: the node with a wrong broker address is {record!r}",
    )
    owned = sorted(c for c, a in view.assignments.items() if a.node == 4)
    result.expect(not owned, f"{when}: the node with a wrong broker address owns {owned}")


async def _first_acks_after(
    writers: dict[str, ChannelWriter],
    channels: Sequence[str],
    since: float,
    result: ScenarioResult,
    round_: int,
    missing: str = "no append after the failover",
) -> list[float]:
    """Each of ``channels``' first acknowledgement after ``since``, waited for 30 s at
    most (then a problem of round ``round_``: ``missing``)."""
    deadline = time.monotonic() + 30
    while any(writers[c].first_ack_after(since) is None for c in channels):
        if time.monotonic() > deadline:
            result.problems.append(f"round {round_}: {missing}")
            break
        await asyncio.sleep(0.05)
    return [t for c in channels if (t := writers[c].first_ack_after(since)) is not None]


async def run_etcd_restart(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("cluster-etcd-restart")
    etcd = await env.private_etcd()
    cluster = _Cluster(env, etcd.endpoint, 4, ttl_s=6)
    resumed: list[float] = []
    async with cluster.writing(balanced_first=True) as writers:
        for round_ in range(rounds):
            view = await cluster.balanced()
            owners = {c: a.node for c, a in view.assignments.items()}
            moves = len(view.moves)
            await etcd.kill()
            result.faults += 1
            await asyncio.sleep(2.0)  # well inside the 6 s lease
            await etcd.start()
            back = time.monotonic()
            view = await cluster.balanced()
            result.expect(
                {c: a.node for c, a in view.assignments.items()} == owners
                and len(view.moves) == moves,
                f"round {round_}: channels moved across an etcd restart",
            )
            missing = "appends did not resume"
            firsts = await _first_acks_after(writers, list(writers), back, result, round_, missing)
            resumed.append(max((first - back for first in firsts), default=0.0))
            result.rounds += 1
        await cluster.check(result)
    result.figures["appends resumed after etcd, max (s)"] = round(max(resumed, default=0), 2)
    return result
