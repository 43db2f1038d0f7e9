"""A routing service that names one owner for every channel: the cluster client's unit
tests run real node servicers behind it and move the owner themselves."""

from __future__ import annotations

from typing import Any

import grpc

from streamwal.cluster.proto import routing_pb2 as routing_pb
from streamwal.cluster.proto import routing_pb2_grpc as routing_grpc

__all__ = ["StaticRouting"]


class StaticRouting(routing_grpc.ClusterRoutingServicer):  # type: ignore[misc]
    """Answers every lookup with :attr:`owner`, serving; set it to move the channels."""

    def __init__(self) -> None:
        self.owner = ""

    async def LookupChannel(self, request: Any, context: Any) -> Any:
        return routing_pb.LookupChannelResponse(
            pchannel=request.pchannel, address=self.owner, state="serving"
        )

    def add_to(self, server: grpc.aio.Server) -> None:
        """Serve this routing on ``server`` (``memory_node``'s ``also``)."""
        routing_grpc.add_ClusterRoutingServicer_to_server(self, server)
