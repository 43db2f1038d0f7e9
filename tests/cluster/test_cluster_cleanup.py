"""Cleaning up after a cluster, as an operator does it: `cluster channels remove
--delete-topics` deletes a channel's topic only once no node serves it, `cluster
delete` removes every key of a stopped cluster (and its topics), both refuse to delete
unasked; `cluster status` shows when each node last renewed its lease."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.cluster import ClusterClient
from streamwal.cluster.operations import LiveNodesError, delete_cluster_keys
from streamwal.cluster.records import ClusterKeys, NodeRecord, encode, now_ms
from streamwal.cluster.store import ClusterStore
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.topics import delete_topics, list_topics
from tests.cluster.harness import LEASE_TTL_S, ClusterFactory, TestCluster
from tests.node.processes import run_streamwal

pytestmark = pytest.mark.integration


def topic(channel: str) -> str:
    """The topic a node's default ``pulsar:`` section gives the channel."""
    return PulsarConfig().topic(channel)


@pytest.fixture
async def make_cluster(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str], unique: str
) -> AsyncIterator[Callable[[int], TestCluster]]:
    clusters = ClusterFactory(stack, tmp_path, lambda: etcd_prefix("cleanup"), f"cleanup-{unique}")
    yield clusters
    await clusters.close()
    # whatever a test left (a refused deletion keeps its topics)
    made = [c for cluster in clusters.made for c in cluster.channels]
    await delete_topics(stack.pulsar_admin_url, [topic(c) for c in made])


async def _cli(*args: str, answer: str | None = None) -> subprocess.CompletedProcess[str]:
    """``streamwal ARGS`` with stdin not a terminal, or, given ``answer``, a terminal
    on which ``answer`` is typed."""
    if answer is None:
        return await asyncio.to_thread(run_streamwal, *args)
    controller, terminal = pty.openpty()
    try:
        os.write(controller, answer.encode() + b"\n")
        return await asyncio.to_thread(run_streamwal, *args, stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)


async def test_remove_with_delete_topics_deletes_only_that_topic_once_unserved(
    make_cluster: Callable[[int], TestCluster], stack: StackInfo
) -> None:
    cluster = make_cluster(3)
    await cluster.serve(1)
    gone, *kept = cluster.channels
    assert {topic(c) for c in cluster.channels} <= await list_topics(stack.pulsar_admin_url)
    config = str(cluster.nodes[1].config_path)

    done = await _cli(
        "cluster", "channels", "remove", "--delete-topics", "--yes", gone, "--config", config
    )
    assert done.returncode == 0, done.stderr
    assert f"topic {topic(gone)} deleted" in done.stdout, done.stdout
    await asyncio.sleep(1.0)  # several polls: nothing may bring the topic back
    topics = await list_topics(stack.pulsar_admin_url)
    assert topic(gone) not in topics
    assert {topic(c) for c in kept} <= topics
    view = await cluster.view()
    assert gone not in view.channels and gone not in view.assignments
    assert all(view.serving(c) for c in kept)
    async with ClusterClient([stack.etcd_endpoint], key_prefix=cluster.prefix) as client:
        for channel in kept:
            await client.produce(channel, b"still served")

    again = await _cli(
        "cluster", "channels", "remove", "--delete-topics", "--yes", gone, "--config", config
    )
    assert again.returncode == 0, again.stderr
    assert f"topic {topic(gone)} already missing" in again.stdout, again.stdout


async def test_remove_with_delete_topics_is_refused_unless_confirmed(
    make_cluster: Callable[[int], TestCluster], stack: StackInfo
) -> None:
    cluster = make_cluster(1)
    await cluster.serve(1)
    (channel,) = cluster.channels
    where = ("--config", str(cluster.nodes[1].config_path))
    admin = ("--pulsar-admin-url", stack.pulsar_admin_url)
    remove = ("cluster", "channels", "remove", "--delete-topics", channel, *where, *admin)

    refused = await _cli(*remove)
    assert refused.returncode == 1, refused
    assert "stdin is not a terminal" in refused.stderr and "--yes" in refused.stderr
    declined = await _cli(*remove, answer="n")
    assert declined.returncode == 1, declined
    assert "delete 1 topics" in declined.stdout and "not confirmed" in declined.stderr

    assert topic(channel) in await list_topics(stack.pulsar_admin_url)
    view = await cluster.view()
    assert channel in view.channels and view.serving(channel)
    # with --etcd there is no node file naming the topics' tenant and namespace: refused
    unknown = await _cli(
        "cluster", "channels", "remove", "--delete-topics", "--yes", channel,
        "--etcd", stack.etcd_endpoint, "--prefix", cluster.prefix, *admin,
    )  # fmt: skip
    assert unknown.returncode == 1 and "--config" in unknown.stderr
    assert channel in (await cluster.view()).channels
    assert topic(channel) in await list_topics(stack.pulsar_admin_url)


async def test_delete_refuses_live_nodes_then_deletes_every_key_and_topic(
    make_cluster: Callable[[int], TestCluster], stack: StackInfo
) -> None:
    cluster = make_cluster(2)
    await cluster.serve(1)
    config = str(cluster.nodes[1].config_path)
    delete = ("cluster", "delete", "--delete-topics", "--config", config)

    live = await _cli(*delete, "--yes")
    assert live.returncode == 1, live
    assert "live node" in live.stderr and "stop or drain them first" in live.stderr
    assert cluster.channels == sorted((await cluster.view()).channels)

    assert await cluster.nodes[1].terminate() == 0
    await cluster.wait_for("no live node", lambda v: not v.nodes, timeout=10)
    refused = await _cli(*delete)
    assert refused.returncode == 1 and "stdin is not a terminal" in refused.stderr
    _revision, entries = await cluster.store.read_prefix(cluster.keys.root)
    assert entries

    done = await _cli(*delete, "--yes")
    assert done.returncode == 0, done.stderr
    assert f"deleted {len(entries)} keys under {cluster.keys.root}" in done.stdout, done.stdout
    for channel in cluster.channels:
        assert f"topic {topic(channel)} deleted" in done.stdout
    _revision, left = await cluster.store.read_prefix(cluster.keys.root)
    assert left == []
    topics = await list_topics(stack.pulsar_admin_url)
    assert not {topic(c) for c in cluster.channels} & topics

    gone = await _cli("cluster", "delete", "--yes", "--config", config)
    assert gone.returncode == 3 and "no cluster under" in gone.stderr, gone


async def test_delete_of_a_wrong_prefix_exits_3_and_deletes_nothing(
    make_cluster: Callable[[int], TestCluster], stack: StackInfo
) -> None:
    cluster = make_cluster(1)
    await cluster.serve(1)
    wrong = await _cli(
        "cluster", "delete", "--yes", "--etcd", stack.etcd_endpoint, "--prefix",
        cluster.prefix + "-typo",
    )  # fmt: skip
    assert wrong.returncode == 3, wrong
    assert "no cluster under" in wrong.stderr and wrong.stdout == ""
    assert (await cluster.view()).nodes


async def test_status_shows_each_nodes_last_lease_renewal(
    make_cluster: Callable[[int], TestCluster],
) -> None:
    cluster = make_cluster(1)
    await cluster.serve(1)
    config = str(cluster.nodes[1].config_path)

    renewals = []
    for _ in range(2):
        done = await _cli("cluster", "status", "--json", "--config", config)
        assert done.returncode == 0, done.stderr
        asked_ms = time.time_ns() // 1_000_000
        (node,) = json.loads(done.stdout)["nodes"]
        assert node["lease_ttl_s"] == LEASE_TTL_S
        assert 0 <= node["lease_remaining_s"] <= LEASE_TTL_S
        renewed = node["lease_renewed_at_ms"]
        # renewed every third of the TTL; etcd counts whole seconds
        assert asked_ms - (LEASE_TTL_S + 1) * 1000 <= renewed <= asked_ms, (renewed, asked_ms)
        renewals.append(renewed)
        await asyncio.sleep(3.0)
    assert renewals[1] - renewals[0] >= 1500, renewals

    text = await _cli("cluster", "status", "--config", config)
    assert text.returncode == 0, text.stderr
    line = next(x for x in text.stdout.splitlines() if x.strip().startswith("1 "))
    assert f"(ttl {LEASE_TTL_S}s) renewed " in line and "s ago" in line, line


async def test_the_key_delete_checks_for_live_nodes_in_its_own_transaction(
    store: ClusterStore, etcd_prefix: Callable[[str], str]
) -> None:
    """etcd compares a key range for every key in it, and a range with no key as one
    missing key (version 0): the delete holds only while no node is registered."""
    keys = ClusterKeys(etcd_prefix("delete"))
    await store.put(keys.channels + "c1", b"{}")
    await store.put(keys.seeded, b"1")
    lease, _ = await store.grant_lease(30)
    record = NodeRecord(1, "127.0.0.1:1", "test", now_ms())
    await store.put(keys.node(1), encode(record), lease=lease)

    assert await store.delete_tree_unless(keys.root, keys.nodes) is None
    with pytest.raises(LiveNodesError, match=r"1 live node\(s\).*127\.0\.0\.1:1"):
        await delete_cluster_keys(store, keys)
    _revision, kept = await store.read_prefix(keys.root)
    assert len(kept) == 3  # nothing went

    await store.revoke_lease(lease)  # the node's key goes with its lease
    assert await delete_cluster_keys(store, keys) == 2
    _revision, left = await store.read_prefix(keys.root)
    assert left == []
