"""What an operator does to a running cluster: read its state, change its channel
set, drain a node. Each is one function on a started :class:`ClusterStore`, so the
CLI, the demo and tests share them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from streamwal.cluster.records import ClusterKeys, Drain, encode
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import InvalidInputError, UnavailableError
from streamwal.wal.backend import validate_channel_name

__all__ = [
    "add_channels",
    "channel_state",
    "drain_node",
    "remove_channels",
    "render_status",
    "status_json",
    "undrain_node",
]


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


def channel_state(view: ClusterView, channel: str) -> str:
    """What a reader of the status should believe: an owner that is gone serves
    nothing, whatever its last report said (status keys outlive their node)."""
    held = view.assignments.get(channel)
    if held is None:
        return "unassigned"
    if held.node not in view.nodes:
        return "not serving (node gone)"
    status = view.current_status(channel)
    return "waiting" if status is None else status.state


def status_json(view: ClusterView, keys: ClusterKeys, *, moves: int = 10) -> dict[str, Any]:
    """``streamwal cluster status --json``; the schema is in docs/deploy.md. Times are
    Unix milliseconds; absent values are ``null``."""
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
                "state": channel_state(view, channel),
                "serving": view.serving(channel),
                "since_ms": None if status is None else status.at_ms,
                "reason": "" if status is None else status.reason,
                "failing_since_ms": None if status is None else status.failing_since_ms,
                "failures": 0 if status is None else status.failures,
                "assigned_at_ms": None if held is None else held.at_ms,
                "assigned_because": None if held is None else held.reason,
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
            for _key, m in view.moves[-moves:]
        ],
    }


def _ago(at_ms: int, now_ms: int) -> str:
    return f"{max(0, now_ms - at_ms) / 1000:.1f}s ago"


def render_status(view: ClusterView, *, moves: int = 10) -> str:
    now = time.time_ns() // 1_000_000
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
        lease = view.node_leases[node_id]
        lines.append(
            f"  {node_id:>4}  {node.address:<22} v{node.version:<8} lease {lease:x}"
            f"  started {_ago(node.started_at_ms, now)}  channels {counts.get(node_id, 0)}{flag}"
        )
    lines.append(f"channels ({len(view.channels)}):")
    for channel in sorted(view.channels | set(view.assignments)):
        held = view.assignments.get(channel)
        s = view.current_status(channel)
        owner = "-" if held is None else str(held.node)
        alive = "" if held is None or held.node in view.nodes else " (gone)"
        state = channel_state(view, channel)
        if s is not None and held is not None and held.node in view.nodes:
            state += f" for {max(0, now - s.at_ms) / 1000:.1f}s"
            if s.failures:
                assert s.failing_since_ms is not None
                state += f", {s.failures} failed opens since {_ago(s.failing_since_ms, now)}"
            if s.reason:
                state += f" ({s.reason})"
        lines.append(f"  {channel:<32} node {owner}{alive:<8} {state}")
    lines.append(f"last moves ({min(moves, len(view.moves))} of {len(view.moves)} kept):")
    for _key, m in view.moves[-moves:]:
        source = "-" if m.previous is None else str(m.previous)
        target = "(removed)" if m.node < 0 else str(m.node)
        lines.append(
            f"  {_ago(m.at_ms, now):>10}  {m.channel:<32} {source} -> {target}  {m.reason}"
            f"  term {m.term}  trace {m.trace_id}" + (f"  ({m.detail})" if m.detail else "")
        )
    return "\n".join(lines)
