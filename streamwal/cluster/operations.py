"""What an operator does to a running cluster: read its state, change its channel
set, drain a node. Each is one function on a started :class:`ClusterStore`, so the
CLI, the demo and tests share them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from streamwal.cluster.records import ClusterKeys, Drain, encode
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import InvalidInputError, UnavailableError
from streamwal.wal.backend import validate_channel_name

__all__ = ["add_channels", "drain_node", "remove_channels", "render_status"]


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
        lease = view.node_leases[node_id]
        lines.append(
            f"  {node_id:>4}  {node.address:<22} v{node.version:<8} lease {lease:x}"
            f"  started {_ago(node.started_at_ms, now)}  channels {counts.get(node_id, 0)}{flag}"
        )
    lines.append(f"channels ({len(view.channels)}):")
    for channel in sorted(view.channels | set(view.assignments)):
        held = view.assignments.get(channel)
        s = view.statuses.get(channel)
        owner = "-" if held is None else str(held.node)
        alive = "" if held is None or held.node in view.nodes else " (gone)"
        state = "unassigned"
        if held is not None:
            state = "waiting"
            if (
                s is not None
                and s.node == held.node
                and s.assignment_revision == view.assignment_revisions[channel]
            ):
                state = s.state + (f" ({s.reason})" if s.reason else "")
        lines.append(f"  {channel:<32} node {owner}{alive:<8} {state}")
    lines.append(f"last moves ({min(moves, len(view.moves))} of {len(view.moves)} kept):")
    for _key, m in view.moves[-moves:]:
        source = "-" if m.previous is None else str(m.previous)
        target = "(removed)" if m.node < 0 else str(m.node)
        lines.append(
            f"  {_ago(m.at_ms, now):>10}  {m.channel:<32} {source} -> {target}  {m.reason}"
            f"  term {m.term}  trace {m.trace_id}"
        )
    return "\n".join(lines)
