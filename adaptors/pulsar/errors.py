"""Turning Pulsar client results into streamwal's typed errors."""

from __future__ import annotations

import pulsar
from pulsar.asyncio import PulsarException

from streamwal.errors import (
    ChannelFencedError,
    ClosedError,
    InvalidInputError,
    OutcomeUnknownError,
    QuotaExceededError,
    StreamwalError,
    UnavailableError,
    WriteOutcome,
)

__all__ = ["FENCING_RESULTS", "LASTING_RESULTS", "after_send", "result_of", "translate"]

#: what a send or a producer creation returns once another owner took the topic
FENCING_RESULTS = frozenset(
    {pulsar.Result.ProducerFenced, pulsar.Result.AlreadyClosed, pulsar.Result.TopicTerminated}
)

# MessageTooBig comes from the client, which checks every payload with its metadata
# against the maxMessageSize the broker announced on connecting: it also catches what
# the adaptor's own pre-check (PulsarConfig.max_message_size) lets through.
_INVALID_RESULTS = frozenset(
    {
        pulsar.Result.MessageTooBig,
        pulsar.Result.InvalidTopicName,
        pulsar.Result.InvalidMessage,
        pulsar.Result.InvalidConfiguration,
        pulsar.Result.InvalidUrl,
    }
)

#: results that asking again does not change: a read that meets one gives up at once
LASTING_RESULTS = _INVALID_RESULTS | {
    pulsar.Result.TopicNotFound,
    pulsar.Result.AuthenticationError,
    pulsar.Result.AuthorizationError,
    pulsar.Result.NotAllowedError,
    pulsar.Result.UnsupportedVersionError,
    pulsar.Result.AlreadyClosed,
}

# Results the client gives without the message having left it: such an append is not
# in the log. Any other failure of an accepted send (a timeout, a fence, a lost
# connection) may come after the broker persisted it.
_NEVER_SENT = _INVALID_RESULTS | {pulsar.Result.ProducerQueueIsFull}


def after_send(error: StreamwalError, result: pulsar.Result | None) -> StreamwalError:
    """``error`` as the answer to an append the client had accepted (``result``: what
    the client reported): unless the message never left the client, it may be in the
    log, so the outcome is unknown and the append is not retried."""
    if result in _NEVER_SENT or error.outcome is WriteOutcome.UNKNOWN:
        return error
    if isinstance(error, ChannelFencedError):
        return error.in_flight()
    if isinstance(error, QuotaExceededError):  # keep its type: the caller acts on it
        return QuotaExceededError(str(error), WriteOutcome.UNKNOWN)
    unknown = OutcomeUnknownError(f"{error}; the append may be in the log")
    unknown.__cause__ = error
    return unknown


_QUOTA_RESULTS = frozenset(
    {
        pulsar.Result.ProducerBlockedQuotaExceededError,
        pulsar.Result.ProducerBlockedQuotaExceededException,
    }
)


def result_of(exc: BaseException) -> pulsar.Result | None:
    """The ``pulsar.Result`` an exception of either client API carries, if any."""
    if isinstance(exc, PulsarException):
        return exc.error()
    if isinstance(exc, pulsar.PulsarException):
        # the sync API raises one subclass per result, named like the result
        return getattr(pulsar.Result, type(exc).__name__, None)
    return None


def translate(exc: BaseException, *, channel: str, what: str) -> StreamwalError:
    """Map a client error to the type a caller can act on; never loses the cause."""
    if isinstance(exc, StreamwalError):
        return exc
    result = result_of(exc)
    if result in FENCING_RESULTS:
        return ChannelFencedError(channel, f"{what}: broker says {result}")
    if result in _QUOTA_RESULTS:
        return QuotaExceededError(
            f"{what} on {channel!r}: the broker's backlog quota blocks the producer ({result})"
        )
    if result in _INVALID_RESULTS:
        return InvalidInputError(f"{what} on {channel!r}: broker says {result}")
    if result is None and isinstance(exc, TimeoutError):
        return UnavailableError(f"{what} on {channel!r}: timed out")
    if result is None:
        return UnavailableError(f"{what} on {channel!r}: {type(exc).__name__}: {exc}")
    if result == pulsar.Result.ProducerBusy:
        return UnavailableError(f"{what} on {channel!r}: another producer holds the topic")
    return UnavailableError(f"{what} on {channel!r}: broker says {result}")


def closed(channel: str) -> ClosedError:
    return ClosedError(f"channel {channel!r} is closed")
