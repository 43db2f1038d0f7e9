"""What a failed append left in the log, read from the failed call alone.

The node says it on every failed append (``streaming.proto``): in band on a produce
stream, in the trailing metadata :data:`OUTCOME_KEY` of a failed ``Produce``. A
failure the node did not describe is judged by how far the call got: a connection
that was never made sent nothing; a call that timed out or broke after sending its
request may have been served.

This module sits below both :mod:`streamwal.node.client_errors` (whose typed errors
carry the outcome) and :mod:`streamwal.node.outcome` (which builds those errors from
in-band answers), so neither needs the other's import.
"""

from __future__ import annotations

import grpc

from streamwal.errors import StreamwalError, WriteOutcome

__all__ = ["OUTCOME_KEY", "write_outcome"]

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
