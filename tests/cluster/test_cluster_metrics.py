"""A cluster node's /metrics: channels per node, moves by reason, the balancer's term
and the failover histogram, after a node was killed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster, owners
from tests.node.processes import free_port
from tests.node.test_metrics import scrape, value

pytestmark = pytest.mark.integration


async def test_cluster_metrics_after_a_failover(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str], unique: str
) -> None:
    channels = [f"cl-metrics-{unique}-{i}" for i in range(4)]
    cluster = TestCluster(stack, tmp_path, etcd_prefix("clmetrics"), channels)
    port = free_port()
    try:
        await cluster.start_balancer_with_metrics(port, 20.0)
        await cluster.start(2)
        view = await cluster.wait_balanced()
        await cluster.nodes[2].kill()
        await cluster.wait_for(
            "node 2's channels on node 1",
            lambda v: all(v.serving(c) and v.assignments[c].node == 1 for c in channels),
        )
        await asyncio.sleep(1.5)  # a balancer round records the counts again
        samples = await asyncio.to_thread(scrape, port)
    finally:
        await cluster.close()
    assert value(samples, "streamwal_cluster_balancer_term", streamwal_node_id="1") == view.term
    assert value(samples, "streamwal_cluster_channels", streamwal_node_id="1") == 4
    moved_off_2 = sum(1 for node in owners(view).values() if node == 2)
    assert value(samples, "streamwal_cluster_moves_total", reason="node-lost") == moved_off_2
    assert value(samples, "streamwal_cluster_moves_total", reason="initial") == 4
    assert value(samples, "streamwal_cluster_moves_total", reason="node-joined") == 2
    assert value(samples, "streamwal_cluster_reassignment_duration_seconds_count") == moved_off_2
    assert value(samples, "streamwal_cluster_reassignment_duration_seconds_sum") < 10 * moved_off_2
