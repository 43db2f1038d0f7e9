"""A cluster of real ``streamwal serve`` processes on the shared stack, for tests.

Short lease, grace and round times keep failovers to a few seconds. Every node is an
in-process TSO candidate on one TSO prefix, as in a deployment without a separate
oracle: killing the TSO leader is part of what a failover survives.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import etcd3
from etcd3 import etcdrpc
from etcd3 import utils as etcd3_utils

from streamwal.cluster.records import ClusterKeys
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView
from streamwal_lab.bench.cluster_run import ChannelWriter as Writer
from streamwal_lab.bench.cluster_run import ClusterViews
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess

__all__ = ["ClusterFactory", "TestCluster", "Writer", "owners", "put_history"]

LEASE_TTL_S = 2
GRACE_S = 1.0


class TestCluster(ClusterViews):
    __test__ = False
    wait_s = 60.0

    def __init__(
        self,
        stack: StackInfo,
        workdir: Path,
        prefix: str,
        channels: Iterable[str],
        **cluster: Any,
    ) -> None:
        self.stack = stack
        self.workdir = workdir
        self.prefix = prefix
        self.channels = list(channels)
        self.keys = ClusterKeys(prefix)
        self.settings = {
            "enabled": True,
            "key_prefix": prefix,
            "lease_ttl_s": LEASE_TTL_S,
            "grace_period_s": GRACE_S,
            "round_interval_s": 0.2,
            "poll_interval_s": 0.2,
            "channels": self.channels,
            **cluster,
        }
        self.nodes: dict[int, NodeProcess] = {}
        #: other sections every node's file gets (telemetry, say)
        self.extra: dict[str, Any] = {}
        #: every node's ``tso:`` section
        self.tso: dict[str, Any] = {"mode": "in-process", "key_prefix": prefix, "lease_ttl_s": 2}
        self.store = ClusterStore([stack.etcd_endpoint])

    def node(self, node_id: int, **cluster: Any) -> NodeProcess:
        settings = {
            "pulsar": {"service_url": self.stack.pulsar_url},
            "etcd": {"endpoints": [self.stack.etcd_endpoint]},
            "tso": self.tso,
            "node": {"shutdown_grace_s": 15},
            "cluster": {**self.settings, **cluster},
            **self.extra,
        }
        process = NodeProcess(self.workdir, node_id, settings)
        self.nodes[node_id] = process
        return process

    async def start(self, *node_ids: int, **cluster: Any) -> None:
        await self.store.start()
        for node_id in node_ids:
            await self.node(node_id, **cluster).start()

    async def serve(self, *node_ids: int) -> ClusterView:
        """Start ``node_ids`` and wait until every channel is served."""
        await self.start(*node_ids)
        return await self.wait_all_serving()

    async def start_balancer_with_metrics(self, port: int, timeout: float = 30.0) -> None:
        """Node 1, serving ``/metrics`` on ``port``, until it runs the balancer (the
        nodes started after it serve no metrics: one process per port)."""
        self.extra = {"node": {"shutdown_grace_s": 15, "metrics_listen": f"127.0.0.1:{port}"}}
        try:
            await self.start(1)
        finally:
            self.extra = {}
        await self.wait_for("node 1 balancing", lambda v: v.balancer_node == 1, timeout)

    async def restart(self, node_id: int) -> None:
        """The same node (same file, same port) again, after it stopped; its earlier
        log is kept beside the new one, which start() reads for "ready"."""
        process = self.nodes[node_id]
        process.log_path.rename(process.log_path.with_suffix(f".{time.monotonic_ns()}.log"))
        await process.start()

    async def wait_all_serving(self, timeout: float = 60.0) -> ClusterView:
        return await self.wait_for(
            "every channel serving",
            lambda v: (
                set(self.channels) <= set(v.assignments)
                and all(v.serving(c) for c in self.channels)
            ),
            timeout,
        )

    async def close(self) -> None:
        for process in self.nodes.values():
            await process.kill()
        await self.store.close()


@dataclass
class ClusterFactory:
    """Makes the clusters of one test, each on channels of its own under ``channel_base``
    and a fresh etcd prefix from ``prefix``, and closes them all at its end."""

    stack: StackInfo
    workdir: Path
    prefix: Callable[[], str]
    channel_base: str
    #: settings every cluster gets unless a call names them itself
    defaults: dict[str, Any] = field(default_factory=dict)
    made: list[TestCluster] = field(default_factory=list)

    def __call__(self, channel_count: int, **cluster: Any) -> TestCluster:
        channels = [f"{self.channel_base}-{len(self.made)}-{i}" for i in range(channel_count)]
        settings = {**self.defaults, **cluster}
        self.made.append(TestCluster(self.stack, self.workdir, self.prefix(), channels, **settings))
        return self.made[-1]

    async def close(self) -> None:
        for cluster in self.made:
            await cluster.close()


def owners(view: ClusterView) -> dict[str, int]:
    return {c: a.node for c, a in view.assignments.items()}


def put_history(
    etcd_endpoint: str, prefix: str, start_revision: int, end_revision: int
) -> list[tuple[int, bytes]]:
    """Every put under ``prefix`` from ``start_revision`` to ``end_revision``, in order,
    read from etcd's own multi-version store (the prefix as of each revision), so no
    write can be missed the way a sampling reader could miss one."""
    host, _, port = etcd_endpoint.rpartition(":")
    client = etcd3.client(host, int(port))
    begin = prefix.encode()
    try:
        puts = []
        for revision in range(start_revision, end_revision + 1):
            request = etcdrpc.RangeRequest(
                key=begin, range_end=etcd3_utils.prefix_range_end(begin), revision=revision
            )
            response = client.kvstub.Range(request, timeout=5)
            puts += [
                (revision, bytes(kv.value)) for kv in response.kvs if kv.mod_revision == revision
            ]
        return puts
    finally:
        client.close()
