"""A cluster member writes log format v2 only once every registered node has said,
for its current run, that it reads v2 (docs/wire-format.md, "Versions"): a node of a
version before v2 (no word under ``formats/``), or an older binary restarted under an
id whose word was for an earlier run, keeps the cluster writing v1."""

from __future__ import annotations

from collections.abc import Callable

from streamwal.cluster.formats import announce, cluster_log_format, log_format_of
from streamwal.cluster.records import ClusterKeys, NodeRecord, ReadsFormats, encode
from streamwal.cluster.store import ClusterStore
from streamwal_lab.stack import StackInfo


def _node(node: int, started: int = 1000) -> NodeRecord:
    return NodeRecord(node, f"127.0.0.1:{9000 + node}", "test", started)


def test_v2_needs_every_node_s_word_for_its_current_run() -> None:
    new = [ReadsFormats(1, 1000, [1, 2]), ReadsFormats(2, 1000, [1, 2])]
    assert log_format_of([_node(1), _node(2)], new) == "v2"
    assert log_format_of([_node(1), _node(2), _node(3)], new) == "v1"  # 3 said nothing
    assert log_format_of([_node(1), _node(2, started=2000)], new) == "v1"  # another run
    assert log_format_of([_node(1)], [ReadsFormats(1, 1000, [1])]) == "v1"
    assert log_format_of([], new) == "v1"


async def test_the_gate_reads_etcd_at_each_open(
    stack: StackInfo, etcd_prefix: Callable[[str], str]
) -> None:
    keys = ClusterKeys(etcd_prefix("formats"))
    async with ClusterStore([stack.etcd_endpoint]) as store:
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
