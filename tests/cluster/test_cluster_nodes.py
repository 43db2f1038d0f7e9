"""A self-managing cluster of real node processes on real etcd and Pulsar."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal.cluster import ClusterClient
from streamwal.cluster.operations import drain_node
from streamwal.cluster.records import Assignment, ClusterKeys, MoveReason, decode
from streamwal.cluster.store import ClusterStore
from streamwal.errors import ChannelNotFoundError, DeposedError, UnavailableError
from streamwal.verify.cli import verify_channel
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import (
    GRACE_S,
    LEASE_TTL_S,
    TestCluster,
    Writer,
    owners,
    put_history,
)
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration

#: the issue's failover goal: kill to first acknowledged append on the new owner
FAILOVER_BOUND_S = LEASE_TTL_S + GRACE_S + 2.0


async def test_a_node_registers_refuses_a_live_duplicate_and_leaves_at_once(
    make_cluster: Callable[..., TestCluster],
) -> None:
    cluster = make_cluster(0)
    await cluster.start(1)
    view = await cluster.view()
    assert set(view.nodes) == {1}
    assert view.nodes[1].address == cluster.nodes[1].address
    assert view.balancer_node == 1 or await cluster.wait_for(
        "a balancer", lambda v: v.balancer_node == 1, 10
    )
    twin_dir = cluster.workdir / "twin"
    twin_dir.mkdir()
    twin = NodeProcess(twin_dir, 1, {})
    twin.config_path.write_text(
        cluster.nodes[1].config_path.read_text().replace(str(cluster.nodes[1].port), str(twin.port))
    )
    with pytest.raises(RuntimeError, match="node id 1 is already registered by a live node"):
        await twin.start(timeout=30)
    assert twin.proc is not None and twin.proc.returncode == 1
    # the wait for the other lease is said once, not at each retry (issue 28)
    assert twin.log_text().count("waiting for its lease to run out") == 1, twin.log_text()
    assert twin.log_text().count("cannot start the node") == 1
    assert await cluster.nodes[1].terminate() == 0
    view = await cluster.view()  # revoked on the way out, not left to expire
    assert view.nodes == {} and view.balancer_node is None


async def test_kill_9_under_writes_fails_over_within_the_bound_with_a_clean_history(
    make_cluster: Callable[..., TestCluster], stack: StackInfo
) -> None:
    cluster = make_cluster(6)
    await cluster.start(1, 2, 3)
    view = await cluster.wait_balanced()
    victim = view.assignments[cluster.channels[0]].node
    moved = [c for c, node in owners(view).items() if node == victim]
    async with ClusterClient([stack.etcd_endpoint], key_prefix=cluster.prefix) as client:
        writers = {c: Writer(client, c) for c in cluster.channels}
        for writer in writers.values():
            writer.start()
        await asyncio.sleep(2.0)
        killed_at = time.monotonic()
        await cluster.nodes[victim].kill()
        view = await cluster.wait_for(
            "the victim's channels serving elsewhere",
            lambda v: all(v.serving(c) and v.assignments[c].node != victim for c in moved),
        )
        await asyncio.sleep(1.0)
        for writer in writers.values():
            await writer.stop()
    reasons = {m.channel: m.reason for _k, m in view.moves if m.channel in moved}
    assert reasons == dict.fromkeys(moved, MoveReason.NODE_LOST)
    for channel in moved:
        first = writers[channel].first_ack_after(killed_at)
        assert first is not None, channel
        print(f"failover {channel}: {first - killed_at:.2f}s (bound {FAILOVER_BOUND_S}s)")
        assert first - killed_at <= FAILOVER_BOUND_S, (channel, first - killed_at)
    for channel, writer in writers.items():
        assert writer.acks, channel
        report = await verify_channel(
            stack.pulsar_url, channel, acks=writer.acks, failures=writer.failures
        )
        assert report.ok, (channel, report.summary())


async def test_a_deposed_balancer_cannot_write_an_assignment(
    store: ClusterStore, etcd_prefix: Callable[[str], str]
) -> None:
    keys = ClusterKeys(etcd_prefix("fence"))
    key = keys.assign + "c"
    old_lease, _ = await store.grant_lease(30)
    old_term = await store.campaign(keys.balancer, b"{}", old_lease)
    assert old_term is not None
    assert await store.fenced_write(keys.balancer, old_term, expect={key: 0}, puts=[(key, b"1")])
    await store.revoke_lease(old_lease)  # the old balancer's lease is gone
    new_lease, _ = await store.grant_lease(30)
    new_term = await store.campaign(keys.balancer, b"{}", new_lease)
    assert new_term is not None and new_term > old_term
    _, entries = await store.read_prefix(key)
    revision = entries[0].mod_revision
    with pytest.raises(DeposedError):
        await store.fenced_write(
            keys.balancer, old_term, expect={key: revision}, puts=[(key, b"2")]
        )
    assert await store.fenced_write(
        keys.balancer, new_term, expect={key: revision}, puts=[(key, b"3")]
    )
    # planned from a revision that is no longer current: refused, not deposed
    assert not await store.fenced_write(
        keys.balancer, new_term, expect={key: revision}, puts=[(key, b"4")]
    )
    assert await store.get(key) == b"3"
    await store.revoke_lease(new_lease)


async def test_a_joining_node_gets_channels_in_bounded_steps(
    make_cluster: Callable[..., TestCluster],
) -> None:
    cluster = make_cluster(6, max_moves_per_round=1)
    await cluster.start(1, 2)
    await cluster.wait_balanced()
    await cluster.start(3)
    most_in_flight = 0
    deadline = time.monotonic() + 90
    while True:
        view = await cluster.view()
        in_flight = [c for c in cluster.channels if not view.serving(c)]
        most_in_flight = max(most_in_flight, len(in_flight))
        on_3 = [c for c, node in owners(view).items() if node == 3]
        if len(on_3) == 2 and not in_flight:
            break
        assert time.monotonic() < deadline, view
        await asyncio.sleep(0.05)
    joined = [m for _k, m in view.moves if m.reason == MoveReason.NODE_JOINED and m.node == 3]
    assert len(joined) == 2
    assert joined[0].at_ms < joined[1].at_ms
    assert most_in_flight == 1  # one move at a time, the next only once it served
    assert sorted(list(owners(view).values()).count(n) for n in (1, 2, 3)) == [2, 2, 2]


async def test_the_balancer_killed_mid_failover_is_replaced_and_its_term_writes_no_more(
    make_cluster: Callable[..., TestCluster], stack: StackInfo
) -> None:
    cluster = make_cluster(6)
    await cluster.start(1)
    await cluster.wait_for("node 1 balancing", lambda v: v.balancer_node == 1, 20)
    await cluster.start(2, 3)
    view = await cluster.wait_balanced()
    old_term, start = view.term, view.revision + 1
    await cluster.nodes[2].kill()
    await cluster.wait_for(
        "the balancer moving node 2's channels",
        lambda v: any(m.reason == MoveReason.NODE_LOST for _k, m in v.moves),
        30,
    )
    await cluster.nodes[1].kill()
    view = await cluster.wait_for(
        "node 3 balancing and serving every channel",
        lambda v: (
            v.balancer_node == 3
            and all(v.serving(c) and v.assignments[c].node == 3 for c in cluster.channels)
        ),
        60,
    )
    assert view.term > old_term
    history = await asyncio.to_thread(
        put_history, stack.etcd_endpoint, cluster.keys.assign, start, view.revision
    )
    terms = [decode(Assignment, raw).term for _rev, raw in history]
    assert old_term in terms and view.term in terms, terms
    first_new = terms.index(view.term)
    assert all(term == view.term for term in terms[first_new:]), terms


async def test_a_rolling_restart_under_writes_keeps_every_acknowledged_append_once(
    make_cluster: Callable[..., TestCluster], stack: StackInfo
) -> None:
    cluster = make_cluster(3)
    await cluster.start(1, 2, 3)
    await cluster.wait_balanced()
    async with ClusterClient([stack.etcd_endpoint], key_prefix=cluster.prefix) as client:
        writers = {c: Writer(client, c) for c in cluster.channels}
        for writer in writers.values():
            writer.start()
        began = time.monotonic()
        for node_id in (1, 2, 3):
            assert await cluster.nodes[node_id].stop(signal.SIGTERM) == 0
            await cluster.restart(node_id)
            await cluster.wait_balanced()
        await asyncio.sleep(1.0)
        for writer in writers.values():
            await writer.stop()
        assert client.moves_followed > 0
    for channel, writer in writers.items():
        gap = writer.max_gap(began)
        print(f"rolling restart {channel}: {len(writer.acks)} acks, longest gap {gap:.2f}s")
        assert not [f for f in writer.failures if f.outcome == "not-written"], channel
        report = await verify_channel(
            stack.pulsar_url, channel, acks=writer.acks, failures=writer.failures
        )
        assert report.ok, (channel, report.summary())
        assert report.acks_checked == len(writer.acks)


def _cli(stack: StackInfo, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "streamwal.cli", "cluster"),
            *("--etcd", stack.etcd_endpoint, "--prefix", prefix, *args),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_operators_add_and_remove_channels_drain_a_node_and_read_the_status(
    make_cluster: Callable[..., TestCluster], stack: StackInfo, unique: str
) -> None:
    cluster = make_cluster(2)
    await cluster.start(1, 2)
    await cluster.wait_balanced()
    extra = f"cl-{unique}-extra"
    added = await asyncio.to_thread(_cli, stack, cluster.prefix, "channels", "add", extra)
    assert added.returncode == 0, added.stderr
    cluster.channels.append(extra)
    await cluster.wait_balanced()
    drained = await asyncio.to_thread(_cli, stack, cluster.prefix, "drain", "1", "--timeout", "60")
    assert drained.returncode == 0, drained.stderr
    view = await cluster.view()
    assert set(owners(view).values()) == {2}
    assert all(view.serving(c) for c in cluster.channels)
    status = await asyncio.to_thread(_cli, stack, cluster.prefix, "status", "--moves", "50")
    assert status.returncode == 0, status.stderr
    text = status.stdout
    assert "draining" in text and cluster.nodes[1].address in text
    for channel in cluster.channels:
        assert re.search(rf"{channel}\s+node 2\s+serving", text), text
    assert re.search(r" 1 -> 2\s+drain\s+term \d+\s+trace [0-9a-f]{32}", text), text
    removed = await asyncio.to_thread(_cli, stack, cluster.prefix, "channels", "remove", extra)
    assert removed.returncode == 0, removed.stderr
    await cluster.wait_for("the removed channel unassigned", lambda v: extra not in v.assignments)
    bad = await asyncio.to_thread(_cli, stack, cluster.prefix, "drain", "7")
    assert bad.returncode == 1 and "node 7 is not a live member" in bad.stderr


async def test_a_client_without_etcd_follows_its_channels_through_the_nodes_routing(
    make_cluster: Callable[..., TestCluster], stack: StackInfo, unique: str
) -> None:
    cluster = make_cluster(2)
    await cluster.start(1, 2)
    view = await cluster.wait_balanced()
    addresses = [p.address for p in cluster.nodes.values()]
    async with ClusterClient(nodes=addresses) as client:
        # a node answers from its own view of etcd, read every poll interval: right
        # after a balancing move (nodes now join as they become ready) it may lag
        deadline = asyncio.get_running_loop().time() + 10
        for channel in cluster.channels:
            while (
                await client.owner(channel, refresh=True) != view.owner_address(channel)
                and asyncio.get_running_loop().time() < deadline
            ):
                await asyncio.sleep(0.2)
            assert await client.owner(channel) == view.owner_address(channel)
        with pytest.raises(ChannelNotFoundError):
            await client.owner(f"cl-{unique}-unknown")
        writers = {c: Writer(client, c) for c in cluster.channels}
        for writer in writers.values():
            writer.start()
        await asyncio.sleep(1.0)
        view = await drain_node(cluster.store, cluster.keys, 1, timeout_s=60)
        await asyncio.sleep(1.0)
        for writer in writers.values():
            await writer.stop()
        assert set(owners(view).values()) == {2}
        assert client.moves_followed > 0
    for channel, writer in writers.items():
        report = await verify_channel(
            stack.pulsar_url, channel, acks=writer.acks, failures=writer.failures
        )
        assert report.ok and report.acks_checked == len(writer.acks) > 0, report.summary()


async def test_a_node_outside_a_cluster_says_so_to_a_routing_look_up(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    settings = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "tso": {"key_prefix": etcd_prefix("noncluster")},
    }
    node = NodeProcess(tmp_path, 1, settings)
    try:
        await node.start()
        async with ClusterClient(nodes=[node.address], retry_for_s=0.5) as client:
            with pytest.raises(UnavailableError, match="not a cluster member"):
                await client.owner("any")
    finally:
        await node.terminate()


async def test_a_node_restarted_right_after_a_crash_waits_for_its_old_lease(
    make_cluster: Callable[..., TestCluster],
) -> None:
    ttl = 8  # longer than a node's start-up: the old lease is still running then
    cluster = make_cluster(0, lease_ttl_s=ttl)
    await cluster.start(1)
    before = (await cluster.view()).nodes[1]
    await cluster.nodes[1].kill()
    started = time.monotonic()
    await cluster.restart(1)
    assert time.monotonic() - started < ttl + 15  # start-up included
    after = (await cluster.view()).nodes[1]
    assert after.started_at_ms > before.started_at_ms
    assert "waiting for its lease to run out" in cluster.nodes[1].log_text()
