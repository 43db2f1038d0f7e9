"""``cluster move``: an operator puts one channel on one node.

The move is the cluster's intent, not a call to a node: :func:`request_move` writes a
:class:`MoveRequest` (``requested/<channel>``) that the balancer carries out in its
next round, with the order every move keeps (the old owner closes the channel and
says so before the new one fences it: :mod:`.follower`), and :func:`wait_moved` waits
until the new owner serves it. A direct ``AssignChannel`` to the target would fence the
owner behind the balancer's back, and the next write routed to the old owner would
take the channel back; a cluster node refuses one.

Refusals are typed, checked before anything is written: a channel not in the set
(:class:`NoSuchChannelError`) or a node that is not a live member
(:class:`NoSuchNodeError`) is a missing thing; a drained or not-ready node, or a move of
the channel already in flight, is :class:`MoveRefusedError`. The balancer checks the
node again when it acts (it may have drained meanwhile) and refuses in the request.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from streamwal.cluster.records import ClusterKeys, MoveRequest, RequestState, decode, encode, now_ms
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import NoSuchChannelError, StreamwalError, UnavailableError, short_repr
from streamwal.wal.backend import validate_channel_name

__all__ = [
    "MoveInFlightError",
    "MoveRefusedError",
    "MoveResult",
    "MoveTimeoutError",
    "NoSuchNodeError",
    "move_channel",
    "request_move",
    "wait_moved",
]

#: how often a waiting move reads the cluster
_POLL_S = 0.2


class NoSuchNodeError(StreamwalError, LookupError):
    """No live member has this node id: nothing to move a channel to."""

    grpc_status = "NOT_FOUND"

    def __init__(self, node: int, live: list[int]) -> None:
        self.node = node
        known = ", ".join(str(n) for n in live) or "none"
        super().__init__(f"node {node} is not a live member (live: {known})")


class MoveRefusedError(StreamwalError):
    """The move cannot be done now: the node does not take channels (drained, not
    ready), or it left before the balancer acted."""

    grpc_status = "FAILED_PRECONDITION"


class MoveInFlightError(MoveRefusedError):
    """The channel is being moved already (an operator's move not yet done, or the
    balancer's last move not settled): a second move would race the first."""


class MoveTimeoutError(UnavailableError):
    """The move was asked for, but the new owner did not serve within the wait; the
    balancer still carries it out (``cluster status`` shows where it is)."""


@dataclass(frozen=True)
class MoveResult:
    channel: str
    node: int
    previous: int | None
    #: the balancer's ``cluster.move`` span (empty: the channel was on the node already)
    trace_id: str
    request_id: str
    detail: str = ""


async def request_move(
    store: ClusterStore, keys: ClusterKeys, channel: str, node: int
) -> tuple[MoveRequest, int | None]:
    """Write the request, refused as the module says; the request and the channel's
    owner when asked."""
    validate_channel_name(channel)
    view = await read_view(store, keys)
    _check(view, keys, channel, node)
    held = view.assignments.get(channel)
    request = MoveRequest(channel, node, uuid.uuid4().hex, now_ms())
    revision = view.requests[channel][1] if channel in view.requests else 0
    if not await store.put_if(keys.requested + channel, encode(request), revision):
        raise MoveInFlightError(f"channel {short_repr(channel)}: another move was just asked for")
    return request, None if held is None else held.node


def _check(view: ClusterView, keys: ClusterKeys, channel: str, node: int) -> None:
    if channel not in view.channels:
        raise NoSuchChannelError(channel, f"not in the channel set under {keys.root}")
    if node not in view.nodes:
        raise NoSuchNodeError(node, sorted(view.nodes))
    if node in view.draining():
        raise MoveRefusedError(f"node {node} is drained: it takes no channels (undrain it first)")
    if not view.nodes[node].ready:
        raise MoveRefusedError(f"node {node} is not ready: {view.nodes[node].not_ready}")
    pending = view.requests.get(channel)
    if pending is not None and pending[0].state == RequestState.PENDING:
        raise MoveInFlightError(
            f"channel {short_repr(channel)} is being moved to node {pending[0].node} already "
            f"(asked {(now_ms() - pending[0].at_ms) / 1000:.1f}s ago)"
        )
    held = view.assignments.get(channel)
    if held is not None and held.node in view.nodes and held.node != node:
        status = view.current_status(channel)
        if status is None or status.state == "opening":
            raise MoveInFlightError(
                f"channel {short_repr(channel)}: its last move (to node {held.node}, "
                f"{held.reason}) has not settled yet"
            )


async def wait_moved(
    store: ClusterStore, keys: ClusterKeys, request: MoveRequest, *, timeout_s: float
) -> MoveRequest:
    """The request as the balancer answered it, once the node serves the channel;
    :class:`MoveRefusedError` if refused, :class:`MoveTimeoutError` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    key = keys.requested + request.channel
    while True:
        raw = await store.get(key)
        answer = None if raw is None else decode(MoveRequest, raw)
        if answer is None or answer.request_id != request.request_id:
            raise MoveRefusedError(
                f"channel {short_repr(request.channel)}: the move was replaced by another one"
            )
        if answer.state == RequestState.REFUSED:
            raise MoveRefusedError(f"move refused: {answer.detail}")
        if answer.state == RequestState.DONE:
            view = await read_view(store, keys)
            held = view.assignments.get(request.channel)
            if held is not None and held.node == request.node and view.serving(request.channel):
                return answer
        if time.monotonic() > deadline:
            where = "not carried out yet" if answer.state == RequestState.PENDING else "assigned"
            raise MoveTimeoutError(
                f"channel {short_repr(request.channel)} does not serve on node {request.node} "
                f"after {timeout_s:g}s ({where}); the move goes on: see `streamwal cluster status`"
            )
        await asyncio.sleep(_POLL_S)


async def move_channel(
    store: ClusterStore, keys: ClusterKeys, channel: str, node: int, *, timeout_s: float
) -> MoveResult:
    """:func:`request_move`, then :func:`wait_moved`."""
    request, previous = await request_move(store, keys, channel, node)
    done = await wait_moved(store, keys, request, timeout_s=timeout_s)
    return MoveResult(channel, node, previous, done.trace_id, done.request_id, done.detail)
