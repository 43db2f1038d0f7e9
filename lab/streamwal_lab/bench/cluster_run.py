"""A self-managing cluster of ``streamwal serve`` processes, and writers that record
what it acknowledged: what ``streamwal bench failover``, the chaos cluster scenarios
and the demo run against the local stack (or any broker and etcd)."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import ClassVar

import grpc

from streamwal.cluster import ClusterClient, ClusterSettings
from streamwal.cluster.records import ClusterKeys
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import StreamwalError
from streamwal.node.outcome import write_outcome
from streamwal.verify.acks import Ack, Failure, digest
from streamwal_lab.bench.node_process import BenchNode
from streamwal_lab.bench.target import BenchTarget

__all__ = ["ChannelWriter", "ClusterViews", "LocalCluster", "balanced", "wait_for_view"]


async def wait_for_view(
    store: ClusterStore,
    keys: ClusterKeys,
    what: str,
    check: Callable[[ClusterView], bool],
    timeout: float,
) -> ClusterView:
    """The first view of the cluster ``check`` accepts, read every 0.1 s; TimeoutError
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        view = await read_view(store, keys)
        if check(view):
            return view
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g}s; last view: {view}")
        await asyncio.sleep(0.1)


def balanced(view: ClusterView, channels: Iterable[str]) -> bool:
    """Every channel serving on a live node, and no ready node two channels above
    another (a node that is not ready is given nothing: it is not counted)."""
    channels = list(channels)
    ready = view.ready_nodes()
    if not set(channels) <= set(view.assignments) or not ready:
        return False
    counts = [sum(1 for a in view.assignments.values() if a.node == n) for n in ready]
    return max(counts) - min(counts) <= 1 and all(view.serving(c) for c in channels)


class ClusterViews:
    """The waits a harness of a cluster offers on its view (the bench's, the tests'),
    written once so that a wait says the same thing in a benchmark and in a test. The
    harness sets ``store``, ``keys`` and ``channels``; ``wait_s`` bounds a wait by
    default (a test's cluster fails sooner than a benchmark's)."""

    store: ClusterStore
    keys: ClusterKeys
    channels: list[str]
    wait_s: ClassVar[float] = 90.0

    async def view(self) -> ClusterView:
        return await read_view(self.store, self.keys)

    async def wait_for(
        self, what: str, check: Callable[[ClusterView], bool], timeout: float | None = None
    ) -> ClusterView:
        bound = self.wait_s if timeout is None else timeout
        return await wait_for_view(self.store, self.keys, what, check, bound)

    async def wait_balanced(self, timeout: float = 90.0) -> ClusterView:
        """Every channel serving and every live node within one channel of the others."""
        return await self.wait_for(
            "balanced and serving", lambda v: balanced(v, self.channels), timeout
        )


class LocalCluster(ClusterViews):
    """``async with LocalCluster(target, workdir, channels, nodes=3) as cluster``.

    Every node is an in-process TSO candidate on the cluster's own prefix (deleted on
    exit with the cluster's keys); ``kill``, ``stop`` and ``start`` one node by id.
    """

    def __init__(
        self,
        target: BenchTarget,
        workdir: Path,
        channels: Iterable[str],
        *,
        nodes: int = 3,
        lease_ttl_s: int = 2,
        grace_s: float = 1.0,
        max_moves_per_round: int = 1,
        extra_env: dict[str, str] | None = None,
        defaults: bool = False,
    ) -> None:
        """``defaults``: the nodes run the product's own lease, grace, round and TSO
        settings (``lease_ttl_s`` and ``grace_s`` are then ignored); otherwise the
        short ones given here, with fast rounds."""
        self.target = target
        self.workdir = workdir
        self.channels = list(channels)
        self.node_ids = list(range(1, nodes + 1))
        self.prefix = f"/cluster-run-{uuid.uuid4().hex[:10]}"
        self.keys = ClusterKeys(self.prefix)
        if defaults:
            lease_ttl_s, grace_s = ClusterSettings.lease_ttl_s, ClusterSettings.grace_period_s
        self.lease_ttl_s = lease_ttl_s
        self.grace_s = grace_s
        tuned = {
            "STREAMWAL_CLUSTER__LEASE_TTL_S": str(lease_ttl_s),
            "STREAMWAL_CLUSTER__GRACE_PERIOD_S": str(grace_s),
            "STREAMWAL_CLUSTER__ROUND_INTERVAL_S": "0.2",
            "STREAMWAL_CLUSTER__POLL_INTERVAL_S": "0.2",
            "STREAMWAL_TSO__LEASE_TTL_S": "2",
        }
        self._env = {
            "STREAMWAL_CLUSTER__ENABLED": "true",
            "STREAMWAL_CLUSTER__KEY_PREFIX": self.prefix,
            "STREAMWAL_CLUSTER__CHANNELS": ",".join(self.channels),
            "STREAMWAL_CLUSTER__MAX_MOVES_PER_ROUND": str(max_moves_per_round),
            "STREAMWAL_NODE__SHUTDOWN_GRACE_S": "15",
            **({} if defaults else tuned),
            **(extra_env or {}),
        }
        self.nodes: dict[int, BenchNode] = {}
        self.store = ClusterStore([target.etcd_endpoint])
        self._starts = itertools.count()

    async def __aenter__(self) -> LocalCluster:
        await self.store.start()
        try:
            for node_id in self.node_ids:
                await self.start(node_id)
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self, node_id: int) -> BenchNode:
        node = BenchNode(
            self.target,
            key_prefix=self.prefix,
            node_id=node_id,
            log_path=self.workdir / f"node-{node_id}-{next(self._starts)}.log",
            extra_env=self._env,
            keep_log=True,  # the cluster's folder keeps every node's story
        )
        await node.__aenter__()
        self.nodes[node_id] = node
        return node

    async def kill(self, node_id: int) -> None:
        await self.nodes[node_id].kill()

    async def stop(self, node_id: int) -> None:
        await self.nodes[node_id].stop()

    def client(self) -> ClusterClient:
        return ClusterClient([self.target.etcd_endpoint], key_prefix=self.prefix)

    async def close(self) -> None:
        for node in self.nodes.values():
            await node.kill()
        try:
            await self.store.delete_prefix(self.prefix + "/")
        finally:
            await self.store.close()


class ChannelWriter:
    """Appends unique payloads to one channel through a :class:`ClusterClient` until
    stopped, recording acknowledgements (and their times) and failures for the
    history checker."""

    def __init__(self, client: ClusterClient, channel: str, *, pause_s: float = 0.01) -> None:
        self.client = client
        self.channel = channel
        self.acks: list[Ack] = []
        self.failures: list[Failure] = []
        self.ack_times: list[float] = []
        #: when each acknowledged append was sent (its first try), beside ``ack_times``
        self.sent_times: list[float] = []
        self._pause = pause_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        for seq in itertools.count():
            if self._stop.is_set():
                return
            payload = f"{self.channel}-{seq}".encode()
            sent = time.monotonic()
            try:
                acked = await self.client.produce(self.channel, payload)
            except grpc.aio.AioRpcError as exc:
                self.failures.append(Failure(digest(payload), write_outcome(exc).value))
                await asyncio.sleep(self._pause)  # an append refused at once must not spin
                continue
            except StreamwalError as exc:  # no owner found in time: nothing was sent
                self.failures.append(Failure(digest(payload), exc.outcome.value))
                await asyncio.sleep(self._pause)
                continue
            self.acks.append(Ack(acked.message_id, acked.time_tick, digest(payload)))
            self.ack_times.append(time.monotonic())
            self.sent_times.append(sent)
            await asyncio.sleep(self._pause)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, 60)

    def first_ack_after(self, moment: float) -> float | None:
        """When the first append sent after ``moment`` was acknowledged. An append sent
        before it may be answered just after it by a node killed at ``moment`` (its
        answer was on the way), which would time a failover at 0 s."""
        return next(
            (t for t, sent in zip(self.ack_times, self.sent_times, strict=True) if sent > moment),
            None,
        )

    def max_gap(self, since: float, until: float | None = None) -> float:
        """The longest time without an acknowledgement between ``since`` and ``until``."""
        end = until if until is not None else float("inf")
        times = [since, *[t for t in self.ack_times if since < t <= end]]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)
