"""Moving one channel in a cluster of real node processes (issue 49): ``cluster move``
end to end with the status before and after, its refusals, the refusal of a direct
``AssignChannel`` on a cluster node, the old owner's ``/metrics`` without the moved
channel's gauges, and ``cluster status`` of a paused node (suspect, its channels unconfirmed).

One cluster of three nodes serves the whole module; the tests run in order and each
leaves every channel serving.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from streamwal.cluster import ClusterClient
from streamwal.cluster.moving import MoveInFlightError, request_move, wait_moved
from streamwal.cluster.operations import drain_node, node_liveness, status_json, undrain_node
from streamwal.cluster.records import MoveReason
from streamwal.cluster.view import read_view
from streamwal.node.client import NodeClient
from streamwal.node.client_errors import NodeCallError
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster, owners
from tests.etcd_keys import EtcdPrefixes
from tests.node.processes import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: the default lease: a paused node's renewal is overdue well before it runs out
LEASE_TTL_S = 5
#: a per-channel gauge every serving channel has
_GAUGE = "streamwal_wal_buffer_size_bytes"


class _Cluster:
    def __init__(self, cluster: TestCluster, metrics_port: int, etcd: str) -> None:
        self.cluster = cluster
        self.metrics_port = metrics_port
        self.where = ["--etcd", etcd, "--prefix", cluster.prefix]

    async def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "streamwal.cli", "cluster", *args, *self.where],
            capture_output=True,
            text=True,
            timeout=90,
            cwd=ROOT,
            check=False,
        )

    async def status(self) -> dict[str, Any]:
        done = await self.cli("status", "--json")
        assert done.returncode == 0, done.stderr
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    def metrics_text(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())


@pytest.fixture(scope="module")
async def three(
    stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[_Cluster]:
    prefixes = EtcdPrefixes(stack.etcd_endpoint)
    unique = uuid.uuid4().hex[:8]
    channels = [f"mv-{unique}-{i}" for i in range(3)]
    cluster = TestCluster(
        stack,
        tmp_path_factory.mktemp("move"),
        prefixes.new("mv"),
        channels,
        lease_ttl_s=LEASE_TTL_S,
    )
    port = free_port()
    try:
        await cluster.start_balancer_with_metrics(port)
        await cluster.start(2, 3)
        await cluster.wait_balanced()
        yield _Cluster(cluster, port, stack.etcd_endpoint)
    finally:
        await cluster.close()
        await prefixes.delete_all()


def _by_name(items: list[dict[str, Any]], key: str = "name") -> dict[Any, dict[str, Any]]:
    return {item[key]: item for item in items}


async def test_a_move_puts_the_channel_on_the_node_and_the_balancer_keeps_it_there(
    three: _Cluster, stack: StackInfo
) -> None:
    cluster = three.cluster
    view = await cluster.wait_balanced()
    channel = next(c for c, node in owners(view).items() if node == 1)
    other = next(c for c, node in owners(view).items() if node == 2)
    before = _by_name((await three.status())["channels"])
    assert before[channel]["owner"] == 1 and before[channel]["state"] == "serving"
    async with ClusterClient([stack.etcd_endpoint], key_prefix=cluster.prefix) as client:
        for i in range(5):
            await client.produce(channel, f"before-{i}".encode())
        assert f'{_GAUGE}{{channel="{channel}"}}' in three.metrics_text()  # node 1 serves it

        done = await three.cli("move", channel, "--to", "2", "--timeout", "60")
        assert done.returncode == 0, done.stderr
        trace = re.search(r"trace ([0-9a-f]{32})", done.stdout)
        assert trace is not None and "from node 1 to node 2" in done.stdout, done.stdout

        after = await three.status()
        moved = _by_name(after["channels"])[channel]
        assert moved["owner"] == 2 and moved["state"] == "serving", moved
        last = [m for m in after["moves"] if m["channel"] == channel][-1]
        assert (last["from"], last["to"], last["reason"]) == (1, 2, MoveReason.REQUESTED)
        assert last["trace_id"] == trace.group(1)

        old = NodeClient(cluster.nodes[1].address)
        new = NodeClient(cluster.nodes[2].address)
        try:
            assert channel not in [c.pchannel for c in (await old.list_channels()).channels]
            assert channel in [c.pchannel for c in (await new.list_channels()).channels]
        finally:
            await old.close()
            await new.close()

        # writes go on, to the new owner; the balancer's rebalancing (node 1 now holds
        # nothing, node 2 two) moves the other channel, never this one back
        for i in range(5):
            await client.produce(channel, f"after-{i}".encode())
        assert await client.owner(channel, refresh=True) == cluster.nodes[2].address
        view = await cluster.wait_for(
            f"{other} rebalanced off node 2",
            lambda v: v.assignments[other].node != 2 and v.serving(other),
            30,
        )
        await asyncio.sleep(2.0)  # a few more rounds
        view = await cluster.wait_balanced()
        assert view.assignments[channel].node == 2
        assert [m.reason for _, m in view.moves if m.channel == channel][-1] == "requested"
        await client.produce(channel, b"still here")
        assert await client.owner(channel, refresh=True) == cluster.nodes[2].address

    # the old owner no longer exports the gauges of the channel it gave up; its
    # counters stay for the retention, so a scrape still sees their last increments
    text = three.metrics_text()
    assert f'{_GAUGE}{{channel="{channel}"}}' not in text
    assert f'streamwal_wal_appends_total{{channel="{channel}",outcome="ok"}} 5.0' in text


async def test_moves_that_cannot_be_done_are_refused_with_their_exit_codes(
    three: _Cluster, stack: StackInfo
) -> None:
    cluster = three.cluster
    view = await cluster.wait_balanced()
    channel = next(c for c, node in owners(view).items() if node != 3)
    source = view.assignments[channel].node

    unknown = await three.cli("move", "no-such-channel", "--to", "1")
    assert unknown.returncode == 3 and "does not exist" in unknown.stderr, unknown.stderr
    nobody = await three.cli("move", channel, "--to", "99")
    assert nobody.returncode == 3 and "node 99 is not a live member" in nobody.stderr

    await drain_node(cluster.store, cluster.keys, 3, timeout_s=60)
    try:
        drained = await three.cli("move", channel, "--to", "3")
        assert drained.returncode == 1 and "node 3 is drained" in drained.stderr, drained.stderr
    finally:
        await undrain_node(cluster.store, cluster.keys, 3)

    # a second move while the first is pending or not settled yet
    view = await cluster.wait_balanced()
    channel = next(c for c, node in owners(view).items() if node != 3)
    source = view.assignments[channel].node
    async with ClusterClient([stack.etcd_endpoint], key_prefix=cluster.prefix) as client:
        request, previous = await request_move(cluster.store, cluster.keys, channel, 3)
        assert previous == source
        with pytest.raises(MoveInFlightError, match=r"being moved|has not settled"):
            await client.move(channel, source)
        done = await wait_moved(cluster.store, cluster.keys, request, timeout_s=60)
    assert re.fullmatch(r"[0-9a-f]{32}", done.trace_id)
    await cluster.wait_balanced()


async def test_a_cluster_node_refuses_a_direct_assign_or_remove(three: _Cluster) -> None:
    cluster = three.cluster
    view = await cluster.wait_balanced()
    channel = next(c for c, node in owners(view).items() if node != 3)
    node = NodeClient(cluster.nodes[3].address)
    try:
        with pytest.raises(NodeCallError) as assign:
            await node.assign(channel)
        assert assign.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "cluster move" in assign.value.details()
        with pytest.raises(NodeCallError) as remove:
            await node.remove(channel)
        assert remove.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "cluster move" in remove.value.details()
    finally:
        await node.close()
    after = await read_view(cluster.store, cluster.keys)
    assert after.assignments[channel].node == view.assignments[channel].node
    assert after.serving(channel)


async def test_a_paused_node_is_suspect_and_its_channels_unconfirmed(three: _Cluster) -> None:
    cluster = three.cluster
    view = await cluster.wait_balanced()
    held = sorted(c for c, node in owners(view).items() if node == 3)
    assert held, owners(view)
    proc = cluster.nodes[3].proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    seen: dict[str, Any] | None = None
    try:
        while time.monotonic() - stopped < LEASE_TTL_S - 0.5:
            view = await read_view(cluster.store, cluster.keys)
            data = status_json(
                view, cluster.keys, liveness=await node_liveness(cluster.store, view)
            )
            node = _by_name(data["nodes"], "id").get(3)
            if node is not None and node["suspect"]:
                seen = data
                break
            await asyncio.sleep(0.2)
        took = time.monotonic() - stopped
    finally:
        proc.send_signal(signal.SIGCONT)
    assert seen is not None, "node 3 never shown as suspect while paused"
    assert took < LEASE_TTL_S - 0.5
    node = _by_name(seen["nodes"], "id")[3]
    assert node["renewal_overdue_s"] > 0
    for channel in held:
        shown = _by_name(seen["channels"])[channel]
        assert shown["state"] == "unconfirmed" and shown["serving"] is False, shown
    # resumed within its lease: it keeps its channels, nothing moved
    after = await cluster.wait_for(
        "node 3 confirmed again",
        lambda v: all(v.serving(c) and v.assignments[c].node == 3 for c in held),
        30,
    )
    data = status_json(after, cluster.keys, liveness=await node_liveness(cluster.store, after))
    await asyncio.sleep(0)
    for _ in range(20):
        if not _by_name(data["nodes"], "id")[3]["suspect"]:
            break
        await asyncio.sleep(0.3)
        after = await read_view(cluster.store, cluster.keys)
        data = status_json(after, cluster.keys, liveness=await node_liveness(cluster.store, after))
    assert not _by_name(data["nodes"], "id")[3]["suspect"]
    assert all(_by_name(data["channels"])[c]["state"] == "serving" for c in held)
