"""What the cluster keeps in etcd, and where: one JSON value per key.

Layout under ``<prefix>/cluster/``:

``nodes/<id>``       a live node (on its session lease): address, version, start time
``balancer``         the balancer's term (on its node's lease); its create revision
                     is the term number, so a later term always has a larger one
``seeded``           set once the configured channel set was written
``channels/<name>``  the channel set
``assign/<name>``    which node owns a channel, written by a balancer under its term,
                     with the channel's own term for that owner
``terms/<name>``     the channel's term (Milvus's ``PChannelInfo.Term``), raised in
                     the transaction of each new assignment; kept when the channel
                     leaves the set, so a channel added again goes on from it
``status/<name>``    what the owner reports: opening, serving or failed (reason,
                     since when its opens fail)
``released/<name>``  the last owner a channel moved away from has closed it there
``drain/<id>``       an operator asked to empty this node (for this start of it)
``moves/<time>``     the last moves with their reasons (the balancer trims them)
``lost/<id>``        a node found dead by evidence before its lease ran out (its
                     gRPC port refused connections): the balancer moves its
                     channels without the grace period; the node deletes the key
                     when it registers again
``requested/<name>`` an operator's move of one channel to one node: pending until the
                     balancer carries it out (or refuses it), then the placement
                     the balancer keeps (:class:`MoveRequest`)
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from streamwal.errors import DecodeError

__all__ = [
    "Assignment",
    "ChannelStatus",
    "ClusterKeys",
    "Drain",
    "Lost",
    "Move",
    "MoveReason",
    "MoveRequest",
    "NodeRecord",
    "Release",
    "RequestState",
    "decode",
    "encode",
    "now_ms",
]

_R = TypeVar("_R")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class MoveReason:
    """Why a channel got its owner; recorded with every assignment and move."""

    INITIAL = "initial"  # a channel without an owner (new cluster, new channel)
    NODE_LOST = "node-lost"
    NODE_JOINED = "node-joined"  # rebalancing onto a node with fewer channels
    DRAIN = "drain"
    OPERATOR = "operator"  # the channel was removed from the set
    OPEN_FAILED = "open-failed"  # its owner kept failing to open it past the bound
    NODE_NOT_READY = "node-not-ready"  # its owner lost its broker (not ready) past the grace
    REQUESTED = "requested"  # an operator moved it (``cluster move``)


@dataclass(frozen=True)
class NodeRecord:
    id: int
    address: str
    version: str
    started_at_ms: int
    #: able to serve (reached the broker): only a ready node is given channels; a
    #: record written before readiness existed decodes as ready
    ready: bool = True
    #: why not, when not ready (``cluster status`` shows it)
    not_ready: str = ""


@dataclass(frozen=True)
class Assignment:
    channel: str
    node: int
    term: int
    reason: str
    at_ms: int
    previous: int | None = None
    #: when the previous owner was found gone (node-lost moves): the failover clock
    lost_at_ms: int | None = None
    #: W3C trace context of the balancer's decision, for the new owner's wal.open
    trace: dict[str, str] = field(default_factory=dict)
    #: a node-lost move: W3C context of its failover's root span (``cluster.failover``,
    #: emitted by the new owner at the channel's first acknowledged write), when the
    #: previous owner was last known alive, and how precisely (ms) that is known
    failover: dict[str, str] = field(default_factory=dict)
    last_alive_ms: int | None = None
    last_alive_precision_ms: int = 0
    #: what the failover acted on: ``connection-refused x2 (seen by node 1)``, ``lease-expired``
    evidence: str = ""
    #: the channel's term for this owner (``terms/<name>``), which the owner opens it
    #: under; 0 in a record written before channels had terms
    channel_term: int = 0


@dataclass(frozen=True)
class ChannelStatus:
    channel: str
    node: int
    state: str  # opening | serving | failed
    reason: str
    at_ms: int
    #: the etcd revision of the assignment this status answers
    assignment_revision: int
    #: when the owner's opens of this assignment began failing (cleared once it
    #: serves): the balancer moves the channel once this is older than its bound
    failing_since_ms: int | None = None
    #: failed opens of this assignment so far
    failures: int = 0


@dataclass(frozen=True)
class Release:
    """A node's word that it closed a channel that moved away from it. The new owner
    fences only once this is written after its assignment (or the old owner is gone,
    or a bound passed): a broker closing a producer at its client's request while
    another client's creation fences it can deadlock (docs/reliability.md)."""

    channel: str
    node: int
    at_ms: int


@dataclass(frozen=True)
class Move:
    channel: str
    previous: int | None
    node: int
    reason: str
    term: int
    at_ms: int
    trace_id: str = ""
    #: what made the move necessary beyond its reason (an open-failed move: the error)
    detail: str = ""


class RequestState:
    PENDING = "pending"  # written by the operator, not yet acted on
    DONE = "done"  # the balancer assigned the channel to the node (or it was there)
    REFUSED = "refused"  # the balancer could not (the node left, drained, not ready)


@dataclass(frozen=True)
class MoveRequest:
    """An operator's word that ``channel`` belongs on ``node``. Once done it pins the
    placement: the balancer's rebalancing leaves the channel there until its node
    drains, is lost or is not ready (a move for any of those reasons ends the pin), or
    another move replaces it."""

    channel: str
    node: int
    request_id: str
    at_ms: int
    state: str = RequestState.PENDING
    #: the balancer's ``cluster.move`` span, once done
    trace_id: str = ""
    #: why refused, or what was done (the channel was there already)
    detail: str = ""


@dataclass(frozen=True)
class Drain:
    node: int
    #: the start this drain applies to: a restarted node comes back undrained
    started_at_ms: int


@dataclass(frozen=True)
class Lost:
    """Another node's word that ``node`` is dead, on evidence a slow or partitioned node
    cannot produce: its advertised gRPC address refused connections (the kernel answers
    for a port nobody listens on; a paused or cut-off process keeps its listening
    socket). Written with the revocation of the node's lease."""

    node: int
    #: the start of the node this is about (a restarted node is another start)
    started_at_ms: int
    #: the lease that was revoked
    lease: int
    #: what was seen: ``connection-refused``
    evidence: str
    #: the first of the consecutive refusals, and how many there were
    first_refused_ms: int
    refusals: int
    #: when the writer decided, and who it was
    declared_ms: int
    by: int
    #: the node's last lease renewal as etcd tells it: ``declared_ms`` less what the
    #: lease had used of its TTL, in whole seconds (etcd counts lease time no finer);
    #: ``None`` when etcd no longer knew the lease
    last_renewal_ms: int | None = None
    #: W3C context of the writer's ``cluster.node_lost`` span (its probes' account):
    #: each failover's ``cluster.evidence`` links to it
    trace: dict[str, str] = field(default_factory=dict)


def encode(record: Any) -> bytes:
    return json.dumps(asdict(record), sort_keys=True).encode()


def decode(cls: type[_R], raw: bytes) -> _R:
    """Raises :class:`DecodeError` for a value this code did not write."""
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        return cls(**data)
    except (ValueError, TypeError) as exc:
        raise DecodeError(f"not a {cls.__name__} record: {raw[:80]!r} ({exc})") from None


class ClusterKeys:
    """The keys of one cluster (``prefix`` is ``cluster.key_prefix``)."""

    def __init__(self, prefix: str) -> None:
        self.root = f"{prefix}/cluster/"
        self.nodes = self.root + "nodes/"
        self.balancer = self.root + "balancer"
        self.seeded = self.root + "seeded"
        self.channels = self.root + "channels/"
        self.assign = self.root + "assign/"
        self.status = self.root + "status/"
        self.drain = self.root + "drain/"
        self.released = self.root + "released/"
        self.moves = self.root + "moves/"
        self.lost = self.root + "lost/"
        self.requested = self.root + "requested/"
        self.terms = self.root + "terms/"

    def node(self, node_id: int) -> str:
        return f"{self.nodes}{node_id}"

    def move(self, at_ns: int, channel: str) -> str:
        return f"{self.moves}{at_ns:020d}-{channel}"
