"""Which log format a cluster member writes: v2 once every registered node reads it.

A node before log format v2 skips a v2 entry as foreign, silently, so a member writes
v2 only when every node registered under ``nodes/`` has said, under ``formats/<id>``
for its current run, that it reads v2 (docs/wire-format.md, "Versions"). The
decision is taken when a channel is opened and holds until its next open; etcd is read
then, not the follower's view, so a node that registered a moment ago counts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TypeVar

from streamwal.cluster.records import ClusterKeys, NodeRecord, ReadsFormats, decode, encode
from streamwal.cluster.store import ClusterStore, Entry
from streamwal.errors import DecodeError, StreamwalError

__all__ = ["READS", "announce", "cluster_log_format", "log_format_of"]

_log = logging.getLogger(__name__)

_R = TypeVar("_R")

READS = [1, 2]
"""The log formats this version reads."""


async def announce(store: ClusterStore, keys: ClusterKeys, record: NodeRecord) -> None:
    """Say that the run of ``record`` reads :data:`READS`."""
    said = ReadsFormats(record.id, record.started_at_ms, READS)
    await store.put(keys.formats + str(record.id), encode(said))


def log_format_of(nodes: Iterable[NodeRecord], said: Iterable[ReadsFormats]) -> str:
    """``"v2"`` if every node of ``nodes`` said for its run that it reads format 2."""
    reads = {(s.node, s.started_at_ms): s.reads for s in said}
    records = list(nodes)
    if records and all(2 in reads.get((n.id, n.started_at_ms), ()) for n in records):
        return "v2"
    return "v1"


async def cluster_log_format(store: ClusterStore, keys: ClusterKeys) -> str:
    """The format a member writes a channel it opens now in; ``"v1"`` if etcd cannot
    tell (a v1 log is read by every node)."""
    try:
        _, node_entries = await store.read_prefix(keys.nodes)
        _, said_entries = await store.read_prefix(keys.formats)
    except StreamwalError as exc:
        _log.warning("cluster: cannot read which log formats the nodes read (%s): v1", exc)
        return "v1"
    return log_format_of(_decoded(NodeRecord, node_entries), _decoded(ReadsFormats, said_entries))


def _decoded(cls: type[_R], entries: list[Entry]) -> list[_R]:
    out: list[_R] = []
    for entry in entries:
        try:
            out.append(decode(cls, entry.value))
        except DecodeError:
            continue  # not a record this code wrote: says nothing
    return out
