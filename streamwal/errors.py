"""The one error hierarchy of streamwal.

Every error a caller can act on is a distinct type rooted in :class:`StreamwalError`.
The module stays whole past 500 lines: one hierarchy in one module is where a caller
finds every error it may have to handle, and each class is a few lines.
``retriable`` tells a retry loop whether trying again may succeed without the caller
changing anything; it is read by the first-time-tick loop and the append retry.

``outcome`` tells whoever made a failed append what the log may hold:
:attr:`WriteOutcome.NOT_WRITTEN` when the entry never reached the log and never will
(the error was raised before the backend had it, or the backend knows it was refused),
:attr:`WriteOutcome.UNKNOWN` when it may be in the log. Only a not-written append may be
retried without risking a second copy, so an unknown outcome is never ``retriable``.

``grpc_status`` names the gRPC status code a node answers the error with (a
``grpc.StatusCode`` name, so this module needs no grpc), and :meth:`StreamwalError.status_details`
the details it sends; a subclass inherits both or says otherwise. The node reads them
(:func:`streamwal.node.servicer.grpc_status_for`); an error that is not a streamwal
error is a bug, answered ``INTERNAL``.
"""

from __future__ import annotations

import enum
from typing import ClassVar, Literal

__all__ = [
    "BackendMismatchError",
    "BatchAppendError",
    "BufferSealedError",
    "ChannelFencedError",
    "ChannelInUseError",
    "ChannelNotFoundError",
    "ClosedError",
    "ConfigError",
    "CorruptedChunkError",
    "DecodeError",
    "DeposedError",
    "DuplicateNodeError",
    "EvictedError",
    "ExclusivityNotEnforcedError",
    "GrpcStatusName",
    "InvalidInputError",
    "MisconfiguredError",
    "NoClusterError",
    "NoSuchChannelError",
    "NotLeaderError",
    "OutcomeUnknownError",
    "PermissionDeniedError",
    "PlacementRefusedError",
    "PortInUseError",
    "QuotaExceededError",
    "SequenceError",
    "SequenceGapError",
    "SequenceTooOldError",
    "StaleTermError",
    "StreamwalError",
    "TimestampOverflowError",
    "TimestampRegressionError",
    "TransactionAbortedError",
    "TransactionError",
    "TransactionExpiredError",
    "TransactionNotFoundError",
    "TruncatedError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnknownPositionError",
    "UnsafeBrokerPolicyError",
    "UnsupportedLogFormatError",
    "WriteOutcome",
    "outcome_of",
    "short_repr",
]

_SHOWN_CHARS = 64

GrpcStatusName = Literal[
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
]  # fmt: skip
"""The names of ``grpc.StatusCode``'s members: a :attr:`StreamwalError.grpc_status`."""


def short_repr(text: str, limit: int = _SHOWN_CHARS) -> str:
    """``repr(text)``, cut to about ``limit`` characters: an error echoing a caller's
    string must stay small (gRPC refuses a status whose details pass its metadata limit)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


class WriteOutcome(enum.Enum):
    """What a failed append left behind (see the module docstring)."""

    NOT_WRITTEN = "not-written"
    UNKNOWN = "unknown"


class StreamwalError(Exception):
    """Root of every streamwal error."""

    retriable: bool = False
    outcome: WriteOutcome = WriteOutcome.NOT_WRITTEN
    grpc_status: ClassVar[GrpcStatusName] = "UNAVAILABLE"
    """The gRPC status a node answers this error with: unless a class says otherwise,
    a passing condition (``UNAVAILABLE``: trying later may work)."""

    def status_details(self) -> str:
        """The details of the gRPC status a node answers this error with: the message,
        unless the class adds what the code alone does not say."""
        return str(self)


def outcome_of(exc: BaseException) -> WriteOutcome:
    """The outcome of an append that raised ``exc``: anything that is not a streamwal
    error (a bug, a cancellation mid-write) may have happened after the backend had it."""
    if isinstance(exc, StreamwalError):
        return exc.outcome
    return WriteOutcome.UNKNOWN


class InvalidInputError(StreamwalError, ValueError):
    """The caller passed something that can never succeed (bad name, oversized payload)."""

    grpc_status = "INVALID_ARGUMENT"


class ConfigError(InvalidInputError):
    """A configuration value is invalid; ``key`` names it (``time_tick_interval``, or
    ``wal.time_tick_interval`` once the node's loader placed it in its section)."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}")


class UnavailableError(StreamwalError):
    """A dependency (broker, etcd, TSO) did not answer in time; trying later may work."""

    retriable = True


class ChannelFencedError(StreamwalError):
    """Another owner took the channel over; this writer will never append again.

    Raised by the backend when the broker refuses the producer, and then by every
    later append on the same WAL, so nothing more is written by a fenced owner. An
    append the backend had already sent when the fence came may have landed before it:
    that one gets the copy :meth:`in_flight` makes, whose outcome is unknown.
    """

    grpc_status = "FAILED_PRECONDITION"

    def __init__(
        self, channel: str, reason: str = "", outcome: WriteOutcome = WriteOutcome.NOT_WRITTEN
    ) -> None:
        self.channel = channel
        self.reason = reason
        self.outcome = outcome
        msg = f"channel {short_repr(channel)} is fenced by another owner"
        super().__init__(f"{msg}: {reason}" if reason else msg)

    def in_flight(self) -> ChannelFencedError:
        """The same fence, for an append that was sent before it: it may be in the log."""
        return ChannelFencedError(self.channel, self.reason, WriteOutcome.UNKNOWN)


class ChannelNotFoundError(StreamwalError, LookupError):
    """The channel is not open on this node."""

    grpc_status = "NOT_FOUND"

    def __init__(self, channel: str, message: str | None = None) -> None:
        self.channel = channel
        super().__init__(message or f"channel {short_repr(channel)} is not open on this node")


class ChannelInUseError(StreamwalError):
    """A channel cannot be deleted while it is served: a node has it open, its
    cluster assigns it to a live node, or a producer or reader is attached to its log.
    Nothing was deleted; stop serving it (remove it from its node or its cluster's
    set) and delete it then."""

    grpc_status = "FAILED_PRECONDITION"

    def __init__(self, channel: str, reason: str) -> None:
        self.channel = channel
        self.reason = reason
        super().__init__(f"channel {short_repr(channel)} is in use ({reason}); nothing deleted")

    def status_details(self) -> str:
        """Told apart from a fence, which shares the code (the client reads the prefix)."""
        return f"channel in use: {self}"


class NoSuchChannelError(ChannelNotFoundError):
    """The channel does not exist at all (no topic on the broker, not in the cluster's
    channel set), as opposed to not being open here right now: waiting cannot help,
    so it is answered at once, and nothing was created to find out. The CLI exits 3."""

    def __init__(self, channel: str, where: str) -> None:
        self.where = where
        super().__init__(channel, f"channel {short_repr(channel)} does not exist ({where})")


class NoClusterError(StreamwalError, LookupError):
    """Nothing of a cluster under the key prefix (no node, no balancer, no channel set):
    most often a wrong prefix or etcd, and reading it as a channel without an owner
    yet, or an empty cluster, would hide that. The CLI exits 3."""

    def __init__(self, root: str, what: str = "no node, no balancer, no channel set") -> None:
        self.root = root
        super().__init__(
            f"no cluster under {root} ({what}): check the key prefix (cluster.key_prefix, "
            "--prefix) and the etcd endpoints"
        )


class ClosedError(StreamwalError):
    """The object was closed (or is closing); no new work is accepted."""

    def status_details(self) -> str:
        return f"node shutting down: {self}"


class NotLeaderError(StreamwalError):
    """This TSO node is not the leader; ``leader`` names the one to ask, if known."""

    retriable = True

    def __init__(self, leader: str | None = None) -> None:
        self.leader = leader
        super().__init__(f"not the TSO leader (leader: {leader or 'unknown'})")


class TimestampOverflowError(StreamwalError):
    """The logical counter ran out within one physical millisecond too many times."""

    retriable = True


class TimestampRegressionError(StreamwalError):
    """A timestamp batch was not strictly above the last one; it is never handed out."""


class EvictedError(StreamwalError):
    """The write-ahead buffer no longer holds what a reader asked for; read the backend."""


class DecodeError(StreamwalError):
    """A persisted message is not a valid streamwal message (foreign producer, corrupt)."""


class UnsupportedLogFormatError(StreamwalError):
    """An entry of a log format (or a WAL record) newer than this reader knows: never
    skipped as foreign (that would lose messages without a trace), so the read ends
    here (not retriable: upgrade the reader)."""

    grpc_status = "FAILED_PRECONDITION"

    def __init__(self, message_id: object, what: str) -> None:
        self.message_id = message_id
        self.what = what
        super().__init__(
            f"message {message_id}: {what} is of a newer log format than this reader "
            "reads (formats 1 and 2)"
        )


class CorruptedChunkError(StreamwalError):
    """A chunked message's records are malformed or one is missing: its payload cannot
    be rebuilt, and skipping it would lose an acknowledged message without a trace, so
    the read ends here (not retriable: the log will not change). ``message_id``: the
    record where it showed."""

    def __init__(self, channel: str, message_id: object, problem: str) -> None:
        self.channel = channel
        self.message_id = message_id
        self.problem = problem
        super().__init__(f"channel {short_repr(channel)}: chunk at {message_id}: {problem}")


class MisconfiguredError(StreamwalError):
    """The node's own set-up is wrong (a file it cannot read, a backend it must not use).

    Neither the caller's input nor a passing outage: retrying cannot help until an
    operator fixes the configuration, so a node answers FAILED_PRECONDITION.
    """

    grpc_status = "FAILED_PRECONDITION"

    def status_details(self) -> str:
        return f"node misconfigured: {self}"


class PortInUseError(MisconfiguredError):
    """A port the node is configured to listen on is taken by another process.

    Binding anyway (gRPC's SO_REUSEPORT would let it) makes two nodes share one
    address, and a scrape of a shared metrics port reads the wrong node's metrics.
    """

    def __init__(self, what: str, address: str, detail: str) -> None:
        self.what = what
        self.address = address
        super().__init__(f"{what} address {address} is already in use ({detail})")


class ExclusivityNotEnforcedError(MisconfiguredError):
    """The broker accepted two exclusive producers on one topic; no WAL is opened on it."""


class UnsafeBrokerPolicyError(MisconfiguredError):
    """A broker policy would delete or duplicate a channel's acknowledged entries.

    ``policies`` names each one found (``message-ttl``, ``backlog-eviction``,
    ``cursor-missing``, ``deduplication``); the message says how to fix it. Raised at
    open, before the channel's first time tick, so nothing is acknowledged on it.
    """

    def __init__(self, channel: str, policies: tuple[str, ...], message: str) -> None:
        self.channel = channel
        self.policies = policies
        super().__init__(message)


class TruncatedError(StreamwalError):
    """A read or a checkpoint before the channel's truncation point: that part of the
    log is deleted (or may be at any moment). ``earliest`` is the first position still
    kept; never an empty or partial result instead.
    """

    grpc_status = "OUT_OF_RANGE"

    def __init__(
        self, channel: str, asked: object, earliest: object, *, through: bool = False
    ) -> None:
        self.channel = channel
        self.asked = asked
        self.earliest = earliest
        #: ``earliest`` is the last message discarded (a truncate to an id), not the
        #: first kept
        self.through = through
        if through:
            super().__init__(
                f"channel {channel!r} is truncated through {earliest} (inclusive); {asked} "
                f"is no longer kept (read after {earliest})"
            )
            return
        super().__init__(
            f"channel {channel!r} is truncated before {earliest}; {asked} is no longer kept "
            f"(read from {earliest} or later)"
        )


class QuotaExceededError(StreamwalError):
    """The broker's backlog quota stops this channel's producer.

    Not retriable as such: a consumer that holds the backlog back must move on (or the
    channel be truncated) first. The message names the quota and the subscription with
    the largest backlog. An append the client had already sent gets ``outcome``
    unknown: the broker may have persisted it before it stopped the producer.
    """

    grpc_status = "RESOURCE_EXHAUSTED"  # a consumer or a truncation must act first

    def __init__(self, message: str, outcome: WriteOutcome = WriteOutcome.NOT_WRITTEN) -> None:
        self.outcome = outcome
        super().__init__(message)


class BackendMismatchError(StreamwalError, TypeError):
    """A message id from one backend was given to another."""


class BufferSealedError(StreamwalError):
    """The write-ahead buffer takes no more entries (owner fenced or closing); read the backend.

    Raised to a buffer reader that has consumed everything the sealed buffer holds.
    """


class OutcomeUnknownError(UnavailableError):
    """The append was handed to the backend and then failed (a timeout, a lost
    connection): it may be in the log, so it is neither acknowledged nor retried
    (a retry could persist it twice)."""

    retriable = False
    outcome = WriteOutcome.UNKNOWN
    grpc_status = "UNKNOWN"  # not UNAVAILABLE: that one says "retry"

    def status_details(self) -> str:
        return f"outcome unknown, it may be in the log: {self}"


class UnknownPositionError(OutcomeUnknownError):
    """The backend reported an append done without saying where it is in the log.

    The entry may or may not be in the log, so it is neither acknowledged nor retried.
    """


class SequenceError(StreamwalError):
    """An idempotent append whose sequence number the WAL cannot place: nothing was
    appended. ``expected`` is the next sequence number the WAL would accept from
    ``producer_id``."""

    grpc_status = "INVALID_ARGUMENT"

    def __init__(self, producer_id: int, sequence: int, expected: int, problem: str) -> None:
        self.producer_id = producer_id
        self.sequence = sequence
        self.expected = expected
        super().__init__(
            f"producer {producer_id}: sequence {sequence} {problem} (next expected: {expected})"
        )


class SequenceGapError(SequenceError):
    """The sequence number skips a whole window ahead of the next one expected: appends
    before it were never sent, or lost (nearer numbers are taken out of order)."""

    def __init__(self, producer_id: int, sequence: int, expected: int) -> None:
        super().__init__(producer_id, sequence, expected, "skips ahead")


class SequenceTooOldError(SequenceError):
    """The sequence number is older than the window the WAL remembers: whether it was
    appended can no longer be told, so it is not appended again."""

    def __init__(self, producer_id: int, sequence: int, expected: int) -> None:
        super().__init__(producer_id, sequence, expected, "is older than the window kept")


class TransactionError(StreamwalError):
    """A transaction cannot go on; nothing of it is (or will be) delivered unless it was
    committed. The caller begins a new one."""

    grpc_status = "ABORTED"

    def __init__(self, txn_id: int, problem: str) -> None:
        self.txn_id = txn_id
        super().__init__(f"transaction {txn_id}: {problem}")


class TransactionNotFoundError(TransactionError):
    """No open transaction has this id here: it ended, or a former owner of the channel
    opened it (a change of owner rolls every transaction in flight back)."""

    def __init__(self, txn_id: int) -> None:
        super().__init__(txn_id, "not open on this owner (ended, or opened by a former owner)")


class TransactionExpiredError(TransactionError):
    """The transaction had no append or keepalive within its keepalive (elapsed time on
    its owner): rolled back."""

    def __init__(self, txn_id: int) -> None:
        super().__init__(txn_id, "expired without a keepalive and was rolled back")


class TransactionAbortedError(TransactionError):
    """The transaction was rolled back by the WAL: the owner was fenced or closed, or one
    of its appends has an unknown outcome (committing could deliver it incomplete)."""

    def __init__(self, txn_id: int, reason: str) -> None:
        self.reason = reason
        super().__init__(txn_id, f"aborted: {reason}")


class DuplicateNodeError(StreamwalError):
    """A live node already holds this node id in the cluster; a second one would share
    its assignments. Stop the other node, or give this one another ``node.id``."""

    def __init__(self, node_id: int, holder: str) -> None:
        self.node_id = node_id
        self.holder = holder
        super().__init__(f"node id {node_id} is already registered by a live node ({holder})")


class PlacementRefusedError(StreamwalError):
    """A direct ``AssignChannel`` or ``RemoveChannel`` on a node whose channels are
    placed by someone else (its cluster): accepting it would fence the owner the
    cluster knows while the cluster keeps routing to it, and the next write would take
    the channel back. ``how`` names the supported way."""

    grpc_status = "FAILED_PRECONDITION"

    def __init__(self, action: str, how: str) -> None:
        self.action = action
        self.how = how
        super().__init__(f"{action} refused: {how}")


class StaleTermError(StreamwalError):
    """An open of a channel under a term below its current one (Milvus's
    ``PChannelInfo.Term``), or under the current term by another node: a newer owner
    was given the channel, so this open would fence it. Nothing was opened; a caller
    that means to take the channel over asks again with a higher term (or none)."""

    grpc_status = "FAILED_PRECONDITION"
    #: the status details start with this, which a client of the node reads back
    DETAILS_PREFIX: ClassVar[str] = "stale term"

    def __init__(self, channel: str, term: int, current: int, holder: int | None = None) -> None:
        self.channel = channel
        self.term = term
        self.current = current
        self.holder = holder
        held = f" (held by node {holder})" if holder is not None else ""
        super().__init__(
            f"channel {short_repr(channel)}: term {term} is stale: its term is {current}{held}"
        )

    def status_details(self) -> str:
        return f"{self.DETAILS_PREFIX}: {self}"


class DeposedError(StreamwalError):
    """This balancer's term ended (its lease expired or a newer term began): the write
    was refused and nothing it decides may be applied any more."""

    def __init__(self, term: int) -> None:
        self.term = term
        super().__init__(f"balancer term {term} is over; its assignment was not written")


class BatchAppendError(StreamwalError):
    """Part of a batch append failed: ``results`` says, message by message in batch
    order, what landed (an ``AppendResult``) and what did not (the typed error that
    single append would have raised, with its own ``outcome``).

    Not retriable as a whole: the landed messages are in the log, and a failed one may
    be too (its outcome says). ``outcome`` is unknown for the same reason.
    """

    outcome = WriteOutcome.UNKNOWN

    def __init__(self, channel: str, results: list[object]) -> None:
        self.channel = channel
        self.results = results
        self.failed: dict[int, StreamwalError] = {
            i: r for i, r in enumerate(results) if isinstance(r, StreamwalError)
        }
        """The failed messages' errors, by their index in the batch."""
        first = min(self.failed) if self.failed else -1
        landed = len(results) - len(self.failed)
        super().__init__(
            f"channel {short_repr(channel)}: {landed} of {len(results)} messages of the batch "
            f"landed; message {first} failed first: {self.failed.get(first)}"
        )

    @property
    def landed(self) -> list[int]:
        """The indices of the messages that are in the log."""
        return [i for i in range(len(self.results)) if i not in self.failed]


class UnauthenticatedError(StreamwalError):
    """No identity the node knows (no token, an unknown one, an unnamed certificate)."""

    grpc_status = "UNAUTHENTICATED"


class PermissionDeniedError(StreamwalError):
    """A known caller without the role or the channel prefix; the answer names both."""

    grpc_status = "PERMISSION_DENIED"
