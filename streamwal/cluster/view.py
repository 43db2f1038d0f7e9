"""One consistent reading of a cluster's keys, parsed: what every role decides from."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from streamwal.cluster.records import (
    Assignment,
    ChannelStatus,
    ClusterKeys,
    Drain,
    Lost,
    Move,
    MoveRequest,
    NodeRecord,
    Release,
    RequestState,
    decode,
)
from streamwal.cluster.store import ClusterStore, Entry
from streamwal.errors import DecodeError
from streamwal.node.terms import ChannelTerm, decode_term

__all__ = ["ClusterView", "read_view"]

_log = logging.getLogger(__name__)


@dataclass
class ClusterView:
    revision: int = 0
    nodes: dict[int, NodeRecord] = field(default_factory=dict)
    node_leases: dict[int, int] = field(default_factory=dict)
    #: mod revision of each node's record: a declaration of its death compares it
    node_revisions: dict[int, int] = field(default_factory=dict)
    balancer_node: int | None = None
    term: int = 0
    seeded: bool = False
    channels: set[str] = field(default_factory=set)
    assignments: dict[str, Assignment] = field(default_factory=dict)
    #: mod revision of each assignment key: the compare of the next write to it
    assignment_revisions: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, ChannelStatus] = field(default_factory=dict)
    drains: dict[int, Drain] = field(default_factory=dict)
    #: per channel: the last release written, and its mod revision
    releases: dict[str, tuple[Release, int]] = field(default_factory=dict)
    moves: list[tuple[str, Move]] = field(default_factory=list)
    #: nodes found dead by evidence (``lost/<id>``), by node id
    lost: dict[int, Lost] = field(default_factory=dict)
    #: per channel: the operator's move (pending, or the placement it pinned), and
    #: its mod revision
    requests: dict[str, tuple[MoveRequest, int]] = field(default_factory=dict)
    #: per channel: its term (``terms/<name>``), and its mod revision
    terms: dict[str, tuple[ChannelTerm, int]] = field(default_factory=dict)

    def draining(self) -> set[int]:
        """Nodes asked to empty themselves, in the start the drain was asked for."""
        return {
            node
            for node, drain in self.drains.items()
            if node in self.nodes and self.nodes[node].started_at_ms == drain.started_at_ms
        }

    def serving(self, channel: str) -> bool:
        """The assigned owner is live and reports serving this very assignment (a
        status key outlives its node: it is not on the node's lease)."""
        status = self.statuses.get(channel)
        assignment = self.assignments.get(channel)
        return (
            status is not None
            and assignment is not None
            and assignment.node in self.nodes
            and status.state == "serving"
            and status.node == assignment.node
            and status.assignment_revision == self.assignment_revisions.get(channel)
        )

    def released(self, channel: str) -> bool:
        """The channel's previous owner has let go of it: there is none, it is gone
        (no live record), or it said it closed the channel after this assignment was
        written. Until then the new owner holds back its fence (:class:`Release`)."""
        assignment = self.assignments.get(channel)
        if assignment is None:
            return True
        previous = assignment.previous
        if previous is None or previous == assignment.node or previous not in self.nodes:
            return True
        return self.released_by(channel, previous, self.assignment_revisions.get(channel, 0))

    def released_by(self, channel: str, node: int, revision: int) -> bool:
        """``node`` released ``channel`` after etcd revision ``revision``."""
        held = self.releases.get(channel)
        return held is not None and held[0].node == node and held[1] > revision

    def pinned(self) -> set[str]:
        """Channels an operator's move placed where they are now: rebalancing leaves
        them (:class:`MoveRequest`)."""
        return {
            channel
            for channel, (request, _rev) in self.requests.items()
            if request.state == RequestState.DONE
            and (held := self.assignments.get(channel)) is not None
            and held.node == request.node
        }

    def channel_term(self, channel: str) -> int:
        """The channel's current term (0: none given yet)."""
        held = self.terms.get(channel)
        assignment = self.assignments.get(channel)
        return max(
            0 if held is None else held[0].term,
            0 if assignment is None else assignment.channel_term,
        )

    def ready_nodes(self) -> set[int]:
        """Live nodes that can take channels (they reached their broker)."""
        return {node for node, record in self.nodes.items() if record.ready}

    def current_status(self, channel: str) -> ChannelStatus | None:
        """The owner's report on the channel's current assignment (``None``: none yet)."""
        status = self.statuses.get(channel)
        assignment = self.assignments.get(channel)
        if (
            status is None
            or assignment is None
            or status.node != assignment.node
            or status.assignment_revision != self.assignment_revisions.get(channel)
        ):
            return None
        return status

    def owner_address(self, channel: str) -> str | None:
        assignment = self.assignments.get(channel)
        if assignment is None or assignment.node not in self.nodes:
            return None
        return self.nodes[assignment.node].address


async def read_view(store: ClusterStore, keys: ClusterKeys) -> ClusterView:
    revision, entries = await store.read_prefix(keys.root)
    view = ClusterView(revision=revision)
    for entry in entries:
        try:
            _place(view, keys, entry)
        except DecodeError as exc:
            _log.warning("ignoring cluster key %s: %s", entry.key, exc)
    view.moves.sort()
    return view


def _place(view: ClusterView, keys: ClusterKeys, entry: Entry) -> None:
    key, raw = entry.key, entry.value
    if key == keys.balancer:
        record = decode(NodeRecord, raw)
        view.balancer_node, view.term = record.id, entry.create_revision
    elif key == keys.seeded:
        view.seeded = True
    elif key.startswith(keys.nodes):
        node = decode(NodeRecord, raw)
        view.nodes[node.id] = node
        view.node_leases[node.id] = entry.lease
        view.node_revisions[node.id] = entry.mod_revision
    elif key.startswith(keys.channels):
        view.channels.add(key[len(keys.channels) :])
    elif key.startswith(keys.assign):
        assignment = decode(Assignment, raw)
        view.assignments[assignment.channel] = assignment
        view.assignment_revisions[assignment.channel] = entry.mod_revision
    elif key.startswith(keys.status):
        status = decode(ChannelStatus, raw)
        view.statuses[status.channel] = status
    elif key.startswith(keys.drain):
        drain = decode(Drain, raw)
        view.drains[drain.node] = drain
    elif key.startswith(keys.released):
        release = decode(Release, raw)
        view.releases[release.channel] = (release, entry.mod_revision)
    elif key.startswith(keys.moves):
        view.moves.append((key, decode(Move, raw)))
    elif key.startswith(keys.lost):
        lost = decode(Lost, raw)
        view.lost[lost.node] = lost
    elif key.startswith(keys.requested):
        request = decode(MoveRequest, raw)
        view.requests[request.channel] = (request, entry.mod_revision)
    elif key.startswith(keys.terms):
        term = decode_term(raw)
        view.terms[term.channel] = (term, entry.mod_revision)
