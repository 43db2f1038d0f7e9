"""A cluster member writes log format v2 only once every registered node has said,
for its current run, that it reads v2 (docs/wire-format.md, "Versions"): a node of a
version before v2 (no word under ``formats/``), or an older binary restarted under an
id whose word was for an earlier run, keeps the cluster writing v1."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId
from streamwal.cluster import ClusterClient
from streamwal.cluster.formats import announce, cluster_log_format, log_format_of
from streamwal.cluster.records import ClusterKeys, NodeRecord, ReadsFormats, encode
from streamwal.cluster.store import ClusterStore
from streamwal.errors import InvalidInputError
from streamwal.verify.cli import read_topic
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message import decode_entry
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster


def _node(node: int, started: int = 1000) -> NodeRecord:
    return NodeRecord(node, f"127.0.0.1:{9000 + node}", "test", started)


def test_v2_needs_every_node_s_word_for_its_current_run() -> None:
    new = [ReadsFormats(1, 1000, [1, 2]), ReadsFormats(2, 1000, [1, 2])]
    assert log_format_of([_node(1), _node(2)], new) == "v2"
    assert log_format_of([_node(1), _node(2), _node(3)], new) == "v1"  # 3 said nothing
    assert log_format_of([_node(1), _node(2, started=2000)], new) == "v1"  # another run
    assert log_format_of([_node(1)], [ReadsFormats(1, 1000, [1])]) == "v1"
    assert log_format_of([], new) == "v1"


@pytest.mark.integration
async def test_the_gate_reads_etcd_at_each_open(
    store: ClusterStore, etcd_prefix: Callable[[str], str]
) -> None:
    keys = ClusterKeys(etcd_prefix("formats"))
    one, two = _node(1), _node(2)
    await store.put(keys.node(1), encode(one))
    await announce(store, keys, one)
    assert await cluster_log_format(store, keys) == "v2"
    await store.put(keys.node(2), encode(two))  # a node before v2 joins: no word
    assert await cluster_log_format(store, keys) == "v1"
    await announce(store, keys, two)  # it is upgraded (and says so)
    assert await cluster_log_format(store, keys) == "v2"
    await store.put(keys.node(2), encode(_node(2, started=5000)))  # rolled back
    assert await cluster_log_format(store, keys) == "v1"
    await store.delete_tree(keys.root)


@pytest.fixture
def cluster_tag() -> str:
    return "fmt"


async def _entries(stack: StackInfo, channel: str) -> list[BackendMessage]:
    return await read_topic(stack.pulsar_url, PulsarConfig().topic(channel))


@pytest.mark.integration
async def test_a_cluster_with_a_node_before_v2_writes_v1_and_an_upgraded_one_v2(
    make_cluster: Callable[..., TestCluster], stack: StackInfo
) -> None:
    """Real node processes: beside a registered node that said nothing about formats
    (a node before v2, never given channels: not ready), the members write v1 and
    refuse what v1 cannot carry; a cluster of upgraded nodes writes v2."""
    old = make_cluster(1)
    await old.store.start()
    # the node before v2: a record on a lease, at an address that accepts and stays silent
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    lease, _ = await old.store.grant_lease(120)
    record = NodeRecord(99, f"127.0.0.1:{port}", "before-v2", 1, False, "a node before v2")
    await old.store.put(old.keys.node(99), encode(record), lease=lease)
    try:
        await old.start(1)
        await old.wait_all_serving()
        async with ClusterClient([stack.etcd_endpoint], key_prefix=old.prefix) as client:
            (channel,) = old.channels
            await client.produce(channel, b"v1", properties={"k": "v"})
            with pytest.raises(InvalidInputError, match="format v1"):
                await client.produce(channel, b"x", properties={"_t": "1"})
        assert all("swf" not in e.properties for e in await _entries(stack, channel))
    finally:
        await old.store.revoke_lease(lease)
        silent.close()

    new = make_cluster(1)
    await new.serve(1, 2)
    said = await new.store.read_prefix(new.keys.formats)
    assert len(said[1]) == 2  # each node's word
    async with ClusterClient([stack.etcd_endpoint], key_prefix=new.prefix) as client:
        (channel,) = new.channels
        acked = await client.produce(channel, b"v2", type="TimeTick", properties={"_t": "1"})
    entries = await _entries(stack, channel)
    assert entries and all(e.properties == {"swf": "2"} for e in entries)
    (mine,) = [
        m
        for e in entries
        for m in decode_entry(e, PulsarMessageId.from_bytes)
        if m.message_id.to_bytes() == acked.message_id
    ]
    assert (mine.type, mine.is_wal_record, dict(mine.properties)) == (
        "TimeTick",
        False,
        {"_t": "1"},
    )
