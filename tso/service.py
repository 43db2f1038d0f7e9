"""The TSO as a gRPC service: ``AllocTimestamp(count)`` served by the oracle.

Several streaming nodes share one oracle this way: each runs the oracle (so one of
them leads) and serves this service; callers use :class:`~streamwal.tso.remote.RemoteSource`,
which follows the not-leader answer of a follower to the leader.

Status mapping (the contract :mod:`streamwal.tso.remote` relies on):
``NotLeaderError`` -> FAILED_PRECONDITION with trailing metadata ``tso-leader``;
``UnavailableError``/``ClosedError`` -> UNAVAILABLE; ``TimestampOverflowError`` ->
RESOURCE_EXHAUSTED; ``InvalidInputError`` -> INVALID_ARGUMENT.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

import grpc
from grpc import aio
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from streamwal.errors import (
    ClosedError,
    InvalidInputError,
    NotLeaderError,
    TimestampOverflowError,
    UnavailableError,
)
from streamwal.lifecycle import Startable
from streamwal.tso.proto import tso_pb2, tso_pb2_grpc

__all__ = [
    "LEADER_METADATA_KEY",
    "TimestampGenerator",
    "TsoServer",
    "TsoServicer",
    "add_tso_servicer",
]

_log = logging.getLogger(__name__)

LEADER_METADATA_KEY = "tso-leader"


class TimestampGenerator(Protocol):
    """What the service serves from: :class:`~streamwal.tso.oracle.TimestampOracle` in practice."""

    async def generate(self, count: int = 1) -> int: ...


class TsoServicer(tso_pb2_grpc.TSOServicer):  # type: ignore[misc]
    """Answers ``AllocTimestamp`` from ``oracle``; never blocks waiting for leadership.

    ``oracle`` may be attached after construction (a node binds its port before it
    knows the address to advertise); until then every call answers UNAVAILABLE.
    ``span_attributes`` go on each call's server span: a node names itself there, as
    one process may serve several nodes and its resource then names none.
    """

    def __init__(
        self,
        oracle: TimestampGenerator | None = None,
        *,
        span_attributes: Mapping[str, AttributeValue] | None = None,
    ) -> None:
        self._oracle = oracle
        self._span_attributes = dict(span_attributes or {})

    def attach(self, oracle: TimestampGenerator) -> None:
        self._oracle = oracle

    async def AllocTimestamp(
        self, request: tso_pb2.AllocTimestampRequest, context: aio.ServicerContext
    ) -> tso_pb2.AllocTimestampResponse:
        if self._span_attributes:
            trace.get_current_span().set_attributes(self._span_attributes)
        count = request.count or 1
        oracle = self._oracle
        try:
            if oracle is None:
                raise UnavailableError("TSO oracle not started yet")
            ts = await oracle.generate(count)
        except NotLeaderError as exc:
            leader = exc.leader or ""
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"not the TSO leader; leader={leader or 'unknown'}",
                trailing_metadata=((LEADER_METADATA_KEY, leader),),
            )
            raise  # unreachable: abort raises
        except (UnavailableError, ClosedError) as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise
        except TimestampOverflowError as exc:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            raise
        except InvalidInputError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        return tso_pb2.AllocTimestampResponse(timestamp=ts, count=count)


def add_tso_servicer(
    server: aio.Server,
    oracle: TimestampGenerator | None,
    *,
    span_attributes: Mapping[str, AttributeValue] | None = None,
) -> TsoServicer:
    """Mount the TSO service on an existing ``grpc.aio`` server (e.g. the node's)."""
    servicer = TsoServicer(oracle, span_attributes=span_attributes)
    tso_pb2_grpc.add_TSOServicer_to_server(servicer, server)
    return servicer


class TsoServer(Startable):
    """A ``grpc.aio`` server carrying only the TSO service.

    ``listen`` is ``host:port`` (port 0 picks a free one; :attr:`port` tells which).
    :meth:`start` binds; :meth:`close` stops (with ``grace_s``) and is idempotent.
    The oracle is not owned; pass ``None`` and :meth:`attach` it once built when it
    must advertise this server's address.
    """

    def __init__(
        self, oracle: TimestampGenerator | None, listen: str, *, grace_s: float = 0.5
    ) -> None:
        self._servicer = TsoServicer(oracle)
        self._listen = listen
        self._grace_s = grace_s
        self._server: aio.Server | None = None
        self._port = 0
        self._closed = False

    def attach(self, oracle: TimestampGenerator) -> None:
        """Serve from ``oracle`` from now on."""
        self._servicer.attach(oracle)

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` as bound (the listen host with the real port)."""
        host = self._listen.rpartition(":")[0] or "127.0.0.1"
        return f"{host}:{self._port}"

    async def start(self) -> None:
        if self._closed:
            raise ClosedError("TSO server is closed")
        if self._server is not None:
            return
        server = aio.server(options=[("grpc.so_reuseport", 0)])
        tso_pb2_grpc.add_TSOServicer_to_server(self._servicer, server)
        try:
            port = server.add_insecure_port(self._listen)
        except RuntimeError as exc:
            raise UnavailableError(f"cannot listen on {self._listen}: {exc}") from exc
        if port == 0:
            raise UnavailableError(f"cannot listen on {self._listen}")
        await server.start()
        self._server = server
        self._port = port
        _log.info("TSO service listening on %s", self.address)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        server, self._server = self._server, None
        if server is not None:
            await server.stop(self._grace_s)
