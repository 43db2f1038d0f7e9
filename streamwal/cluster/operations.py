"""What an operator does to a running cluster: read its state, change its channel
set, drain a node, delete channels' topics or the whole cluster. Each is one function
on a started :class:`ClusterStore` (and, for topics, a :class:`PulsarAdmin`), so the
CLI, the demo and tests share them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from streamwal.cluster.records import ClusterKeys, Drain, RequestState, encode
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import InvalidInputError, StreamwalError, UnavailableError
from streamwal.wal.backend import validate_channel_name

if TYPE_CHECKING:
    from streamwal.adaptors.pulsar.admin import PulsarAdmin

__all__ = [
    "ChannelsStillServedError",
    "LiveNodesError",
    "NodeLiveness",
    "TopicsInUseError",
    "add_channels",
    "channel_state",
    "cluster_topics_channels",
    "delete_cluster_keys",
    "delete_topics",
    "drain_node",
    "node_liveness",
    "remove_channels",
    "render_status",
    "require_no_live_nodes",
    "status_json",
    "suspects",
    "undrain_node",
    "wait_unserved",
]

_T = TypeVar("_T")


class ChannelsStillServedError(UnavailableError):
    """Removed channels still assigned to a live node after the bound: deleting their
    topics now would pull the log from under a node that serves them."""


class TopicsInUseError(UnavailableError):
    """The broker kept refusing to delete topics a producer or reader still holds."""


class LiveNodesError(StreamwalError):
    """Live nodes are registered: deleting their cluster's keys under them would leave
    nodes serving channels nobody can find, and their balancer would write keys
    back."""


async def add_channels(store: ClusterStore, keys: ClusterKeys, channels: Iterable[str]) -> None:
    """Add to the set (the balancer places them in its next round). The set counts as
    seeded from now on, so a balancer's configured channels no longer apply."""
    names = [validate_channel_name(c) for c in channels]
    await store.create_all_if_absent(keys.seeded, {})
    for name in names:
        await store.put(keys.channels + name, b"")


async def remove_channels(store: ClusterStore, keys: ClusterKeys, channels: Iterable[str]) -> None:
    """Remove from the set; the balancer withdraws their assignments and the owners
    close them. Their logs stay in Pulsar."""
    names = [validate_channel_name(c) for c in channels]
    await store.create_all_if_absent(keys.seeded, {})
    for name in names:
        await store.delete(keys.channels + name)


async def wait_unserved(
    store: ClusterStore,
    keys: ClusterKeys,
    channels: Iterable[str],
    *,
    timeout_s: float,
    poll_s: float = 0.2,
) -> ClusterView:
    """Wait until none of ``channels`` is assigned to a live node (the balancer
    withdraws a removed channel in its next round, and the owner closes it on its next
    poll); :class:`ChannelsStillServedError` after ``timeout_s``. An assignment left to
    a node that is gone counts as withdrawn: with no node left, no balancer would ever
    remove it, and the broker refuses the delete of a topic a stray process holds."""
    names = set(channels)
    deadline = time.monotonic() + timeout_s
    while True:
        view = await read_view(store, keys)
        held = {
            c: a.node for c, a in view.assignments.items() if c in names and a.node in view.nodes
        }
        if not held:
            return view
        if time.monotonic() > deadline:
            owners = ", ".join(f"{c} on node {n}" for c, n in sorted(held.items()))
            balancer = "" if view.balancer_node is not None else " (no balancer is running)"
            raise ChannelsStillServedError(
                f"still assigned after {timeout_s:g}s: {owners}{balancer}; topics not "
                "deleted (run the command again to retry)"
            )
        await asyncio.sleep(poll_s)


async def delete_topics(
    admin: PulsarAdmin,
    topics: Iterable[str],
    *,
    timeout_s: float,
    poll_s: float = 0.5,
) -> dict[str, bool]:
    """Delete each topic (full name) on the broker: ``True`` deleted, ``False`` it was
    not there. The delete is not forced: the broker refuses it while a producer or
    reader is attached, which is the proof that no node still serves the channel, so
    a refusal is tried again until ``timeout_s`` (:class:`TopicsInUseError`)."""
    wanted = sorted(set(topics))
    present = await _existing(admin, wanted)
    outcome = {topic: False for topic in wanted if topic not in present}
    pending = [topic for topic in wanted if topic in present]
    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    while pending:
        for topic in list(pending):
            try:
                await admin.delete(admin.topic_path(topic))
            except UnavailableError as exc:
                last[topic] = str(exc)
                continue
            outcome[topic] = True
            pending.remove(topic)
        if not pending:
            break
        if time.monotonic() > deadline:
            reasons = "; ".join(f"{t}: {last[t]}" for t in pending)
            raise TopicsInUseError(
                f"{len(pending)} topic(s) not deleted after {timeout_s:g}s ({reasons}); "
                "run the command again to retry"
            )
        await asyncio.sleep(poll_s)
    return outcome


async def _existing(admin: PulsarAdmin, topics: list[str]) -> set[str]:
    """Which of ``topics`` the broker has: one listing per namespace, so a missing
    topic is told apart from a deleted one (the admin API answers both with nothing)."""
    found: set[str] = set()
    for namespace in {t.partition("://")[2].rpartition("/")[0] for t in topics}:
        listed = await admin.get(f"persistent/{namespace}")
        if isinstance(listed, list):
            found.update(str(t) for t in listed)
    return found


def cluster_topics_channels(view: ClusterView) -> set[str]:
    """Every channel a cluster knows: its set, and what is assigned (a channel removed
    from the set keeps its assignment until a balancer withdraws it)."""
    return view.channels | set(view.assignments)


def require_no_live_nodes(view: ClusterView, keys: ClusterKeys) -> None:
    """:class:`LiveNodesError` when ``view`` has registered nodes."""
    if view.nodes:
        live = ", ".join(f"{n} ({r.address})" for n, r in sorted(view.nodes.items()))
        raise LiveNodesError(
            f"{len(view.nodes)} live node(s) under {keys.root}: {live}; stop or drain them "
            "first (or --force)"
        )


async def delete_cluster_keys(
    store: ClusterStore, keys: ClusterKeys, *, force: bool = False
) -> int:
    """Delete every key under the cluster's root; how many went. :class:`LiveNodesError`
    while nodes are registered, unless ``force``: checked in the delete's own etcd
    transaction, so a node that registers after any earlier check keeps its cluster."""
    if force:
        return await store.delete_tree(keys.root)
    deleted = await store.delete_tree_unless(keys.root, keys.nodes)
    if deleted is not None:
        return deleted
    require_no_live_nodes(await read_view(store, keys), keys)  # names them
    raise LiveNodesError(
        f"a key under {keys.nodes} was there when the delete ran (a node that has left "
        "since, or a record this version cannot read); nothing was deleted: try again, "
        "or --force"
    )


@dataclass(frozen=True)
class NodeLiveness:
    """When a node last renewed its session lease, as etcd tells it (to the second)."""

    #: the TTL the lease was granted
    ttl_s: int
    #: what is left of it
    remaining_s: int
    renewed_at_ms: int


async def node_liveness(store: ClusterStore, view: ClusterView) -> dict[int, NodeLiveness]:
    """Each live node's last renewal, from its lease's granted and remaining TTL: a
    node record says the node registered, not that it still renews (a hung process
    stays listed for up to one TTL). Nodes whose lease ran out meanwhile are left out."""
    ttls = await store.lease_ttls(view.node_leases.values())
    now = time.time_ns() // 1_000_000
    liveness: dict[int, NodeLiveness] = {}
    for node_id, lease in view.node_leases.items():
        ttl = ttls.get(lease)
        if ttl is not None:
            # etcd rounds the remaining TTL down to a whole second: the renewal lies in
            # the second before now - (granted - remaining); take the middle of it
            elapsed_ms = max(0, (ttl.granted_s - ttl.remaining_s) * 1000 - 500)
            liveness[node_id] = NodeLiveness(ttl.granted_s, ttl.remaining_s, now - elapsed_ms)
    return liveness


#: beyond a node's renewal interval (a third of its TTL) before it counts as suspect:
#: etcd's remaining TTL is whole seconds (half a second either way) plus a late renewal
SUSPECT_SLACK_S = 1.0


def suspects(
    liveness: Mapping[int, NodeLiveness], now_ms: int, slack_s: float = SUSPECT_SLACK_S
) -> dict[int, float]:
    """Nodes whose renewal is overdue, and by how many seconds: a node renews every
    third of its TTL, so one that has not for longer (and the slack) is paused, hung
    or gone, though its lease (and its record) lives on until the TTL runs out. Its
    channels' last reports are not confirmed until it renews again."""
    overdue: dict[int, float] = {}
    for node, live in liveness.items():
        late = (now_ms - live.renewed_at_ms) / 1000 - live.ttl_s / 3 - slack_s
        if late > 0:
            overdue[node] = late
    return overdue


async def drain_node(
    store: ClusterStore, keys: ClusterKeys, node: int, *, timeout_s: float, poll_s: float = 0.2
) -> ClusterView:
    """Ask the balancer to move every channel off ``node`` and wait until each of them
    serves elsewhere; :class:`UnavailableError` if that takes longer than ``timeout_s``.
    The drain lasts until the node restarts (a new start is not drained)."""
    view = await read_view(store, keys)
    record = view.nodes.get(node)
    if record is None:
        known = ", ".join(str(n) for n in sorted(view.nodes)) or "none"
        raise InvalidInputError(f"node {node} is not a live member (live: {known})")
    await store.put(keys.drain + str(node), encode(Drain(node, record.started_at_ms)))
    held = {c for c, a in view.assignments.items() if a.node == node}
    deadline = time.monotonic() + timeout_s
    while True:
        view = await read_view(store, keys)
        left = {c for c, a in view.assignments.items() if a.node == node}
        held |= left
        if not left and all(view.serving(c) for c in held if c in view.assignments):
            return view
        if time.monotonic() > deadline:
            raise UnavailableError(
                f"node {node} still holds {sorted(left) or 'no'} channels, and "
                f"{sorted(c for c in held if not view.serving(c))} do not serve yet "
                f"after {timeout_s:.0f}s"
            )
        await asyncio.sleep(poll_s)


async def undrain_node(store: ClusterStore, keys: ClusterKeys, node: int) -> None:
    """End a drain before the node restarts: the balancer may place channels on it
    again (a joining node's bounded steps). :class:`InvalidInputError` when no drain
    of ``node`` is recorded."""
    view = await read_view(store, keys)
    if node not in view.drains:
        draining = ", ".join(str(n) for n in sorted(view.drains)) or "none"
        raise InvalidInputError(f"node {node} is not drained (drained: {draining})")
    await store.delete(keys.drain + str(node))


def channel_state(
    view: ClusterView, channel: str, suspect: Mapping[int, float] | None = None
) -> str:
    """What a reader of the status should believe: an owner that is gone serves
    nothing, whatever its last report said (status keys outlive their node); one
    whose renewal is overdue (``suspect``) may not be serving: ``unconfirmed``."""
    held = view.assignments.get(channel)
    if held is None:
        return "unassigned"
    if held.node not in view.nodes:
        return "not serving (node gone)"
    if suspect and held.node in suspect:
        return "unconfirmed"
    status = view.current_status(channel)
    return "waiting" if status is None else status.state


def status_json(
    view: ClusterView,
    keys: ClusterKeys,
    *,
    moves: int = 10,
    liveness: Mapping[int, NodeLiveness] | None = None,
) -> dict[str, Any]:
    """``streamwal cluster status --json``; the schema is in docs/deploy.md. Times are
    Unix milliseconds; absent values are ``null``. Fields are only ever added within
    one ``schema`` number, so a reader of schema 1 keeps working."""
    liveness = liveness or {}
    suspect = suspects(liveness, time.time_ns() // 1_000_000)
    pinned = view.pinned()
    draining = view.draining()
    counts: dict[int, int] = {}
    for a in view.assignments.values():
        counts[a.node] = counts.get(a.node, 0) + 1
    channels = []
    for channel in sorted(view.channels | set(view.assignments)):
        held = view.assignments.get(channel)
        status = view.current_status(channel)
        channels.append(
            {
                "name": channel,
                "in_set": channel in view.channels,
                "owner": None if held is None else held.node,
                "owner_live": held is not None and held.node in view.nodes,
                "state": channel_state(view, channel, suspect),
                "serving": view.serving(channel) and (held is None or held.node not in suspect),
                "since_ms": None if status is None else status.at_ms,
                "reason": "" if status is None else status.reason,
                "failing_since_ms": None if status is None else status.failing_since_ms,
                "failures": 0 if status is None else status.failures,
                "assigned_at_ms": None if held is None else held.at_ms,
                "assigned_because": None if held is None else held.reason,
                "pinned": channel in pinned,
            }
        )
    return {
        "schema": 1,
        "keys": keys.root,
        "revision": view.revision,
        "balancer": {"node": view.balancer_node, "term": view.term},
        "nodes": [
            {
                "id": node_id,
                "address": node.address,
                "version": node.version,
                "started_at_ms": node.started_at_ms,
                "lease": format(view.node_leases[node_id], "x"),
                **_lease_json(liveness.get(node_id)),
                "suspect": node_id in suspect,
                "renewal_overdue_s": (round(suspect[node_id], 1) if node_id in suspect else None),
                "ready": node.ready,
                "not_ready": node.not_ready,
                "draining": node_id in draining,
                "channels": counts.get(node_id, 0),
            }
            for node_id, node in sorted(view.nodes.items())
        ],
        "channels": channels,
        "moves": [
            {
                "at_ms": m.at_ms,
                "channel": m.channel,
                "from": m.previous,
                "to": None if m.node < 0 else m.node,
                "reason": m.reason,
                "detail": m.detail,
                "term": m.term,
                "trace_id": m.trace_id,
            }
            for _key, m in _last(view.moves, moves)
        ],
        "requested": [
            {"channel": r.channel, "node": r.node, "at_ms": r.at_ms, "request_id": r.request_id}
            for r, _rev in sorted(view.requests.values(), key=lambda held: held[0].at_ms)
            if r.state == RequestState.PENDING
        ],
    }


def _last(items: list[_T], count: int) -> list[_T]:
    """The last ``count`` of ``items`` (``items[-0:]`` would be all of them)."""
    return items[max(0, len(items) - count) :]


def _lease_json(live: NodeLiveness | None) -> dict[str, int | None]:
    return {
        "lease_ttl_s": None if live is None else live.ttl_s,
        "lease_remaining_s": None if live is None else live.remaining_s,
        "lease_renewed_at_ms": None if live is None else live.renewed_at_ms,
    }


def _ago(at_ms: int, now_ms: int) -> str:
    return f"{max(0, now_ms - at_ms) / 1000:.1f}s ago"


def _renewed(live: NodeLiveness | None, now_ms: int) -> str:
    if live is None:
        return "  lease expired"
    return f" (ttl {live.ttl_s}s) renewed {_ago(live.renewed_at_ms, now_ms)}"


def render_status(
    view: ClusterView,
    *,
    moves: int = 10,
    liveness: Mapping[int, NodeLiveness] | None = None,
) -> str:
    """The text of ``cluster status``; without ``liveness`` (no lease query made) the
    nodes' renewal times are left out."""
    now = time.time_ns() // 1_000_000
    suspect = suspects(liveness or {}, now)
    pinned = view.pinned()
    draining = view.draining()
    lines = [
        f"balancer: node {view.balancer_node} (term {view.term})"
        if view.balancer_node is not None
        else "balancer: none"
    ]
    lines.append(f"nodes ({len(view.nodes)}):")
    counts: dict[int, int] = {}
    for a in view.assignments.values():
        counts[a.node] = counts.get(a.node, 0) + 1
    for node_id, node in sorted(view.nodes.items()):
        flag = "  draining" if node_id in draining else ""
        if not node.ready:
            flag += f"  NOT READY ({node.not_ready})"
        if node_id in suspect:
            flag += f"  SUSPECT (renewal overdue {suspect[node_id]:.1f}s)"
        lease = view.node_leases[node_id]
        renewed = "" if liveness is None else _renewed(liveness.get(node_id), now)
        lines.append(
            f"  {node_id:>4}  {node.address:<22} v{node.version:<8} lease {lease:x}{renewed}"
            f"  started {_ago(node.started_at_ms, now)}  channels {counts.get(node_id, 0)}{flag}"
        )
    lines.append(f"channels ({len(view.channels)}):")
    for channel in sorted(view.channels | set(view.assignments)):
        held = view.assignments.get(channel)
        s = view.current_status(channel)
        owner = "-" if held is None else str(held.node)
        alive = "" if held is None or held.node in view.nodes else " (gone)"
        state = channel_state(view, channel, suspect)
        if held is not None and held.node in suspect:
            state += f" (node {held.node} suspect: last report {s.state if s else 'none'})"
        elif s is not None and held is not None and held.node in view.nodes:
            state += f" for {max(0, now - s.at_ms) / 1000:.1f}s"
            if s.failures:
                assert s.failing_since_ms is not None
                state += f", {s.failures} failed opens since {_ago(s.failing_since_ms, now)}"
            if s.reason:
                state += f" ({s.reason})"
        pin = "  (placed by cluster move)" if channel in pinned else ""
        lines.append(f"  {channel:<32} node {owner}{alive:<8} {state}{pin}")
    pending = [r for r, _rev in view.requests.values() if r.state == RequestState.PENDING]
    # asked for, not carried out yet (no balancer runs, say)
    for r in sorted(pending, key=lambda r: r.at_ms):
        lines.append(f"  requested {_ago(r.at_ms, now)}: {r.channel} -> node {r.node}")
    lines.append(f"last moves ({min(moves, len(view.moves))} of {len(view.moves)} kept):")
    for _key, m in _last(view.moves, moves):
        source = "-" if m.previous is None else str(m.previous)
        target = "(removed)" if m.node < 0 else str(m.node)
        lines.append(
            f"  {_ago(m.at_ms, now):>10}  {m.channel:<32} {source} -> {target}  {m.reason}"
            f"  term {m.term}  trace {m.trace_id}" + (f"  ({m.detail})" if m.detail else "")
        )
    return "\n".join(lines)
