"""The ``ClusterRouting`` service: any cluster node says where a channel is served.

It answers from the node's latest reading of the cluster (the follower's, at most one
poll interval old), so a look-up costs no etcd request; an answer may be one move
behind, and the client's retry on FAILED_PRECONDITION or NOT_FOUND asks again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from streamwal.cluster.proto import routing_pb2 as pb
from streamwal.cluster.proto import routing_pb2_grpc as pb_grpc
from streamwal.cluster.view import ClusterView
from streamwal.errors import short_repr

__all__ = ["NO_SUCH_CHANNEL", "RoutingServicer", "add_routing_servicer"]

#: trailing metadata of a NOT_FOUND that waiting cannot change: the cluster's channel
#: set is written and lacks the channel (a client raises NoSuchChannelError at once)
NO_SUCH_CHANNEL = ("streamwal-no-such-channel", "1")


class RoutingServicer(pb_grpc.ClusterRoutingServicer):  # type: ignore[misc]
    def __init__(self, latest_view: Callable[[], ClusterView | None]) -> None:
        self._latest_view = latest_view

    async def LookupChannel(
        self, request: pb.LookupChannelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.LookupChannelResponse:
        view = self._latest_view()
        channel = request.pchannel
        if view is None:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, "this node has not read the cluster's state yet"
            )
        assert view is not None  # abort raised
        assignment = view.assignments.get(channel)
        if assignment is None and view.seeded and channel not in view.channels:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"channel {short_repr(channel)} does not exist (not in the cluster's channel set)",
                trailing_metadata=(NO_SUCH_CHANNEL,),
            )
        if assignment is None or assignment.node not in view.nodes:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"channel {short_repr(channel)} has no live owner now",
            )
        assert assignment is not None
        status = view.statuses.get(channel)
        state = "waiting"
        if (
            status is not None
            and status.node == assignment.node
            and status.assignment_revision == view.assignment_revisions.get(channel)
        ):
            state = status.state
        return pb.LookupChannelResponse(
            pchannel=channel,
            node_id=assignment.node,
            address=view.nodes[assignment.node].address,
            state=state,
            term=assignment.term,
            read_revision=view.revision,
        )


class _NotMember(pb_grpc.ClusterRoutingServicer):  # type: ignore[misc]
    async def LookupChannel(
        self, request: pb.LookupChannelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.LookupChannelResponse:
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            "this node is not a cluster member (cluster.enabled is false)",
        )
        raise AssertionError("context.abort returned")


def add_routing_servicer(
    server: grpc.aio.Server, latest_view: Callable[[], ClusterView | None] | None
) -> None:
    """Serve look-ups from ``latest_view``; ``None``: answer that this node is no member."""
    servicer = _NotMember() if latest_view is None else RoutingServicer(latest_view)
    pb_grpc.add_ClusterRoutingServicer_to_server(servicer, server)
