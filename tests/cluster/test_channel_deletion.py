"""Deleting a channel of a cluster: its topic and subscriptions on the shared broker,
and every key the cluster keeps of it in etcd (and no other channel's), refused while
a live node is assigned the channel; the code ``cluster channels remove
--delete-topics`` runs (tests/cluster/test_cluster_cleanup.py runs the command)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.cluster.channel_records import ClusterChannelRecords, delete_channels
from streamwal.cluster.operations import remove_channels, wait_unserved
from streamwal.cluster.records import (
    Assignment,
    ChannelStatus,
    ClusterKeys,
    Move,
    MoveRequest,
    NodeRecord,
    Release,
    encode,
    now_ms,
)
from streamwal.cluster.store import ClusterStore
from streamwal.errors import ChannelInUseError, NoSuchChannelError
from streamwal.node.client import NodeClient
from streamwal.node.client_errors import NodeChannelInUseError, NodeChannelNotFoundError
from streamwal.wal.deletion import delete_channel
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster

pytestmark = pytest.mark.integration


async def _keys_of(store: ClusterStore, keys: ClusterKeys) -> set[str]:
    _revision, entries = await store.read_prefix(keys.root)
    return {e.key for e in entries}


async def test_delete_removes_the_topic_and_only_that_channels_keys(
    stack: StackInfo, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    channel = f"cdel-{unique}"
    # names that share a prefix or a suffix with it: their keys must stay
    others = [f"{channel}0", f"a-{channel}"]
    keys = ClusterKeys(etcd_prefix("cdel"))
    config = PulsarConfig(service_url=stack.pulsar_url, admin_url=stack.pulsar_admin_url)
    admin = PulsarAdmin(stack.pulsar_admin_url)
    path = PulsarAdmin.topic_path(config.topic(channel))
    await admin.put(path)
    for subscription in ("streamwal-wal", "streamwal-consumer-indexer"):
        await admin.put(f"{path}/subscription/{subscription}")

    async with ClusterStore([stack.etcd_endpoint]) as store, PulsarOpener(config) as opener:
        lease, _ = await store.grant_lease(30)
        await store.put(
            keys.node(7), encode(NodeRecord(7, "127.0.0.1:1", "test", now_ms())), lease=lease
        )
        for name in (channel, *others):
            await store.put(keys.channels + name, b"")
            await store.put(keys.assign + name, encode(Assignment(name, 7, 1, "initial", 0)))
            status = ChannelStatus(name, 7, "serving", "", 0, 1)
            await store.put(keys.status + name, encode(status))
            await store.put(keys.released + name, encode(Release(name, 7, 0)))
            await store.put(keys.requested + name, encode(MoveRequest(name, 7, "r", 0)))
            await store.put(keys.terms + name, b'{"channel": "x", "term": 1, "node": 7}')
            move = Move(name, None, 7, "initial", 1, 0)
            await store.put(keys.move(now_ms() * 1_000_000, name), encode(move))
        before = await _keys_of(store, keys)
        records = [ClusterChannelRecords(store, keys)]

        # assigned to a live node: refused, nothing deleted
        with pytest.raises(ChannelInUseError, match="node 7 of the cluster"):
            await delete_channel(opener, channel, records)
        assert await _keys_of(store, keys) == before
        assert set(await admin.get(f"{path}/subscriptions")) == {
            "streamwal-wal",
            "streamwal-consumer-indexer",
        }

        # the node is gone: its assignment no longer serves
        await store.revoke_lease(lease)
        done = await delete_channel(opener, channel, records)
        assert done.log_deleted and done.subscriptions_deleted == 2
        # set, assign, status, released, requested, term, a move
        assert done.keys_deleted == 7
        assert await admin.get(f"{path}/subscriptions") is None
        left = await _keys_of(store, keys)
        # the node's key went with its lease
        kept = {k for k in before if not k.endswith(channel) or k.endswith(others[1])}
        assert left == kept - {keys.node(7)}
        assert len(left) == len(before) - 1 - 7
        for name in others:
            assert keys.assign + name in left

        with pytest.raises(NoSuchChannelError):
            await delete_channel(opener, channel, records)
        # the cluster command's form: a channel of which nothing is left is None
        assert await delete_channels(opener, [channel], records, timeout_s=1) == {channel: None}
        assert await admin.get(f"{path}/subscriptions") is None

        # keys left by a run whose topic delete went through are still deleted
        await store.put(keys.status + channel, encode(ChannelStatus(channel, 7, "", "", 0, 1)))
        finished = await delete_channel(opener, channel, records)
        assert not finished.log_deleted and finished.keys_deleted == 1


async def test_delete_channel_through_a_cluster_node(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str], unique: str
) -> None:
    """A cluster's node deletes the cluster's keys of a channel too, and refuses while
    the channel is assigned to it."""
    channel = f"cdeln-{unique}"
    cluster = TestCluster(stack, tmp_path, etcd_prefix("cdeln"), [channel])
    admin = PulsarAdmin(stack.pulsar_admin_url)
    path = PulsarAdmin.topic_path(PulsarConfig().topic(channel))
    try:
        await cluster.start(1)
        await cluster.wait_all_serving()
        async with NodeClient(cluster.nodes[1].address) as client:
            with pytest.raises(NodeChannelInUseError):
                await client.delete_channel(channel)
            assert await admin.get(f"{path}/subscriptions") is not None

            await remove_channels(cluster.store, cluster.keys, [channel])
            await wait_unserved(cluster.store, cluster.keys, [channel], timeout_s=30)
            deadline = asyncio.get_running_loop().time() + 30
            while True:  # the owner lets go of the topic on its next poll
                try:
                    done = await client.delete_channel(channel)
                    break
                except NodeChannelInUseError:
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(0.5)
            assert done.subscriptions_deleted >= 1 and done.keys_deleted >= 1
            assert await admin.get(f"{path}/subscriptions") is None
            left = await _keys_of(cluster.store, cluster.keys)
            assert not [k for k in left if k.endswith(f"/{channel}") or k.endswith(f"-{channel}")]
            with pytest.raises(NodeChannelNotFoundError):
                await client.delete_channel(channel)
    finally:
        await cluster.close()
        await admin.delete(f"{path}?force=true")
