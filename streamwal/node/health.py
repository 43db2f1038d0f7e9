"""The standard gRPC health service, with ``Watch`` streams that end at shutdown.

grpcio's own asyncio servicer keeps a ``Watch`` stream open after the node turns
NOT_SERVING, so every watcher (a load balancer, a sidecar) held a graceful stop for
the whole grace period. Here a watcher gets NOT_SERVING, then its stream ends with
OK, and the server stops as soon as the in-flight work is done.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health_pb2 as hpb
from grpc_health.v1 import health_pb2_grpc

__all__ = ["HealthService"]

_Status = int  # a HealthCheckResponse.ServingStatus value


class HealthService(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self._status: dict[str, _Status] = {"": hpb.HealthCheckResponse.NOT_SERVING}
        self._changed = asyncio.Condition()
        self._stopping = False

    async def set(self, service: str, status: _Status) -> None:
        """Ignored once shutdown began: a stopping node never turns SERVING again."""
        async with self._changed:
            if not self._stopping:
                self._status[service] = status
                self._changed.notify_all()

    async def enter_graceful_shutdown(self) -> None:
        """Every service NOT_SERVING for good; open ``Watch`` streams send it and end."""
        async with self._changed:
            self._stopping = True
            for service in self._status:
                self._status[service] = hpb.HealthCheckResponse.NOT_SERVING
            self._changed.notify_all()

    async def Check(
        self, request: hpb.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> hpb.HealthCheckResponse:
        status = self._status.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return hpb.HealthCheckResponse(status=status)

    async def Watch(
        self, request: hpb.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        sent: _Status | None = None
        while True:
            async with self._changed:
                while self._current(request.service) == sent and not self._stopping:
                    await self._changed.wait()
                status, stopping = self._current(request.service), self._stopping
            if status != sent:  # written outside the lock: a slow peer blocks nobody
                await context.write(hpb.HealthCheckResponse(status=status))
                sent = status
            if stopping:
                return

    def _current(self, service: str) -> _Status:
        return self._status.get(service, int(hpb.HealthCheckResponse.SERVICE_UNKNOWN))
