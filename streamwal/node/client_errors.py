"""The errors a client of the node raises: one type per thing a caller can do about it.

Each is a :class:`~streamwal.errors.StreamwalError` of the kind the library raises for
the same condition (a fenced channel is a :class:`~streamwal.errors.ChannelFencedError`
whether it came from a WAL in process or over gRPC), carries the write outcome of the
append it ends (``outcome``; a read writes nothing, so a read's error is never
phrased as a write outcome: ``read`` is true, its outcome not written), and keeps
the gRPC status as a detail: it is also a ``grpc.aio.AioRpcError``, so ``code()``,
``details()`` and the trailing metadata stay where code written against raw gRPC
errors looks for them.
"""

from __future__ import annotations

import grpc

from streamwal.errors import (
    ChannelFencedError,
    ChannelInUseError,
    ChannelNotFoundError,
    InvalidInputError,
    MisconfiguredError,
    OutcomeUnknownError,
    PermissionDeniedError,
    QuotaExceededError,
    StaleTermError,
    StreamwalError,
    TransactionAbortedError,
    TransactionExpiredError,
    TransactionNotFoundError,
    TruncatedError,
    UnauthenticatedError,
    UnavailableError,
    WriteOutcome,
)
from streamwal.node.call_outcome import write_outcome

__all__ = [
    "NodeCallError",
    "NodeChannelInUseError",
    "NodeChannelNotFoundError",
    "NodeFencedError",
    "NodeInvalidInputError",
    "NodeMisconfiguredError",
    "NodeOutcomeUnknownError",
    "NodePermissionDeniedError",
    "NodeQuotaError",
    "NodeStaleTermError",
    "NodeTransactionAbortedError",
    "NodeTransactionExpiredError",
    "NodeTransactionNotFoundError",
    "NodeTruncatedError",
    "NodeUnauthenticatedError",
    "NodeUnavailableError",
    "node_error",
    "read_error",
]


class NodeCallError(StreamwalError, grpc.aio.AioRpcError):  # type: ignore[misc]
    """A call to a node failed: ``outcome`` says what it may have left in the log,
    ``code()`` and ``details()`` what the node (or gRPC) said. A failed idempotent
    append names its numbers (``producer_id``, ``sequence``): trying it again with
    them (``NodeClient.produce(..., producer_id=, sequence=)``) resolves an unknown
    outcome, as the node answers a copy it has with the first result."""

    producer_id: int | None = None
    sequence: int | None = None
    #: the error ends a read (``Consume``): nothing was written, and the text says no
    #: write outcome (a timed-out read is not an append whose fate is open)
    read = False

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        outcome: WriteOutcome,
        trailing_metadata: grpc.aio.Metadata | None = None,
    ) -> None:
        grpc.aio.AioRpcError.__init__(
            self, code, grpc.aio.Metadata(), trailing_metadata or grpc.aio.Metadata(), details
        )
        self.args = (details,)
        self.outcome = outcome
        self.channel = ""  # what the library's errors of the same kind carry

    def __str__(self) -> str:
        if self.read:
            return f"{self.code().name}: {self.details()} (a read: nothing was written)"
        return f"{self.code().name}: {self.details()} (write outcome: {self.outcome.value})"

    __repr__ = grpc.aio.AioRpcError.__repr__


class NodeChannelNotFoundError(NodeCallError, ChannelNotFoundError):
    """NOT_FOUND: the channel is not open on that node (ask the cluster for its owner)."""


class NodeFencedError(NodeCallError, ChannelFencedError):
    """FAILED_PRECONDITION: another node took the channel over."""


class NodeStaleTermError(NodeCallError, StaleTermError):
    """FAILED_PRECONDITION: the open's term is below the channel's (or its current term,
    held by another node): a newer owner exists, and nothing was opened."""


class NodeMisconfiguredError(NodeCallError, MisconfiguredError):
    """FAILED_PRECONDITION from a node whose own set-up is wrong: no retry helps."""


class NodeInvalidInputError(NodeCallError, InvalidInputError):
    """INVALID_ARGUMENT: the request can never succeed as it is."""


class NodeTransactionAbortedError(NodeCallError, TransactionAbortedError):
    """ABORTED: the transaction cannot go on; begin a new one."""


class NodeTransactionExpiredError(NodeCallError, TransactionExpiredError):
    """ABORTED: the transaction outlived its keepalive and was rolled back."""


class NodeTransactionNotFoundError(NodeCallError, TransactionNotFoundError):
    """ABORTED: the transaction is not open on this owner (ended, or a former owner's)."""


class NodeChannelInUseError(NodeCallError, ChannelInUseError):
    """FAILED_PRECONDITION: the channel is served, so it was not deleted."""


class NodeTruncatedError(NodeCallError, TruncatedError):
    """OUT_OF_RANGE: that part of the log is truncated."""


class NodeQuotaError(NodeCallError, QuotaExceededError):
    """RESOURCE_EXHAUSTED: the broker's backlog quota (or a message over a limit)."""


class NodeUnauthenticatedError(NodeCallError, UnauthenticatedError):
    """UNAUTHENTICATED: the node knows no identity for this call (give a token or a
    client certificate one of its ``auth.identities`` names)."""


class NodePermissionDeniedError(NodeCallError, PermissionDeniedError):
    """PERMISSION_DENIED: the caller's roles or channel prefixes do not allow it;
    nothing was changed."""


class NodeUnavailableError(NodeCallError, UnavailableError):
    """The node could not be reached or did not answer, and nothing was written."""


class NodeOutcomeUnknownError(NodeCallError, OutcomeUnknownError):
    """The append may be in the log: a try reached the node and its answer was lost,
    or the node could not tell. An idempotent append is resolved by retrying it with
    the same producer id and sequence (the node answers a copy with its first result)."""


def node_error(
    exc: grpc.aio.AioRpcError,
    outcome: WriteOutcome | None = None,
    details: str | None = None,
) -> NodeCallError:
    """``exc`` as the typed error for its status. ``outcome`` overrides what the call
    itself says (an earlier try of the same append may have been written)."""
    if outcome is None:
        if isinstance(exc, NodeCallError):
            return exc
        outcome = write_outcome(exc)
    code = exc.code()
    text = exc.details() or "" if details is None else details
    trailing = exc.trailing_metadata()
    metadata = trailing if isinstance(trailing, grpc.aio.Metadata) else None
    return _class_of(code, text, outcome)(code, text, outcome, metadata)


def read_error(exc: grpc.aio.AioRpcError) -> NodeCallError:
    """``exc``, which ended a read, as its typed error: a read writes nothing, so its
    outcome is not written and a call that timed out or broke is
    :class:`NodeUnavailableError` (trying the read again is safe), never an unknown
    write outcome."""
    if isinstance(exc, NodeCallError) and exc.read:
        return exc
    code = exc.code()
    text = exc.details() or ""
    trailing = exc.trailing_metadata()
    metadata = trailing if isinstance(trailing, grpc.aio.Metadata) else None
    error = _class_of(code, text, WriteOutcome.NOT_WRITTEN)(
        code, text, WriteOutcome.NOT_WRITTEN, metadata
    )
    error.read = True
    return error


_BY_CODE: dict[grpc.StatusCode, type[NodeCallError]] = {
    grpc.StatusCode.NOT_FOUND: NodeChannelNotFoundError,
    grpc.StatusCode.INVALID_ARGUMENT: NodeInvalidInputError,
    grpc.StatusCode.OUT_OF_RANGE: NodeTruncatedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: NodeQuotaError,
    grpc.StatusCode.UNAUTHENTICATED: NodeUnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: NodePermissionDeniedError,
}


def _class_of(code: grpc.StatusCode, details: str, outcome: WriteOutcome) -> type[NodeCallError]:
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        if details.startswith("node misconfigured"):
            return NodeMisconfiguredError
        if details.startswith("channel in use"):
            return NodeChannelInUseError
        if details.startswith(StaleTermError.DETAILS_PREFIX):
            return NodeStaleTermError
        return NodeFencedError
    if code == grpc.StatusCode.ABORTED:
        if "expired" in details:
            return NodeTransactionExpiredError
        if "not open on this owner" in details:
            return NodeTransactionNotFoundError
        return NodeTransactionAbortedError
    typed = _BY_CODE.get(code)
    if typed is not None:
        return typed
    # what is left says the call did not finish: unavailable if nothing was written
    if outcome is WriteOutcome.UNKNOWN:
        return NodeOutcomeUnknownError
    return NodeUnavailableError
