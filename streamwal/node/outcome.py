"""What a failed append left in the log, as a client of the node reads it.

The node says it on every failed append (``streaming.proto``): in band on a produce
stream, in the trailing metadata :data:`OUTCOME_KEY` of a failed ``Produce``. A
failure the node did not describe is judged by how far the call got: a connection
that was never made sent nothing; a call that timed out or broke after sending its
request may have been served.
"""

from __future__ import annotations

import grpc

from streamwal.errors import StreamwalError, WriteOutcome
from streamwal.node.client_errors import NodeCallError, node_error
from streamwal.node.proto import streaming_pb2 as pb

__all__ = ["OUTCOME_KEY", "in_band_error", "rpc_error", "write_outcome"]

OUTCOME_KEY = "streamwal-write-outcome"

# codes gRPC itself gives before a handler runs: the request was not served
_REFUSED_BEFORE_HANDLER = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)


def write_outcome(exc: BaseException) -> WriteOutcome:
    """The outcome of an append that failed with ``exc`` (a ``grpc.aio.AioRpcError``
    from :class:`~streamwal.node.client.NodeClient` or a raw stub)."""
    if isinstance(exc, StreamwalError):
        return exc.outcome
    if not isinstance(exc, grpc.aio.AioRpcError):
        return WriteOutcome.UNKNOWN
    for key, value in exc.trailing_metadata() or ():
        if key == OUTCOME_KEY:
            try:
                return WriteOutcome(value)
            except ValueError:
                break
    code = exc.code()
    if code in _REFUSED_BEFORE_HANDLER:
        return WriteOutcome.NOT_WRITTEN
    if code == grpc.StatusCode.UNAVAILABLE and "failed to connect" in (exc.details() or "").lower():
        return WriteOutcome.NOT_WRITTEN  # gRPC's text for a connection never made
    return WriteOutcome.UNKNOWN


_CODES = {code.value[0]: code for code in grpc.StatusCode}
_OUTCOMES = {pb.NOT_WRITTEN: WriteOutcome.NOT_WRITTEN, pb.OUTCOME_UNKNOWN: WriteOutcome.UNKNOWN}


def rpc_error(
    code: grpc.StatusCode, details: str, outcome: WriteOutcome | None = None
) -> NodeCallError:
    """A failure as a client sees a failed call, so in-band and call errors are handled
    alike (``outcome``: where :func:`write_outcome` finds it), as its typed error."""
    empty = grpc.aio.Metadata()
    trailing = (
        grpc.aio.Metadata() if outcome is None else grpc.aio.Metadata((OUTCOME_KEY, outcome.value))
    )
    return node_error(grpc.aio.AioRpcError(code, empty, trailing, details))


def in_band_error(error: pb.AppendError, which: str) -> NodeCallError:
    """An in-band error as the status a unary ``produce`` would have raised, with the
    outcome where :func:`write_outcome` finds it (none from an older node: unknown)."""
    code = _CODES.get(error.code, grpc.StatusCode.UNKNOWN)
    return rpc_error(code, f"{which}: {error.message}", _OUTCOMES.get(error.outcome))
