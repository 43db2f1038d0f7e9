"""Consumer checkpoints and truncation: the contract, and the WAL's truncation rule.

A named consumer records a checkpoint on a channel: the id of the last message it has
persisted downstream, with that message's time tick. A channel keeps everything from
the slowest registered consumer's checkpoint and everything younger than its
retention window (``WALConfig.retention``); the owner truncates before the older of
the two, and only there: nothing else deletes. A read or a checkpoint before the
truncation point gets :class:`~streamwal.errors.TruncatedError`.

Beside that rule, an owner may truncate to an id it names (Milvus's
``WALImpls.Truncate``: every message up to and including it may be discarded), which
registered consumers clamp to just before the slowest checkpoint: the checkpoint's own
message stays, since resuming after it reads it to find its place. The two kinds are
recorded apart (``truncated_before``, ``truncated_through``: one is a bound, the other
a message), and :class:`TruncationPoint` decides what either has discarded, by message
id: a backend that stores several messages per entry discards an entry only once all
its messages are covered.

Backends that can do this implement :class:`BackendRetention` beside
:class:`~streamwal.wal.backend.BackendWAL` (an optional ability, like Milvus's small interfaces).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from streamwal.errors import InvalidInputError, QuotaExceededError, TruncatedError
from streamwal.wal.backend import CHANNEL_NAME_PATTERN
from streamwal.wal.message_id import MessageId

__all__ = [
    "BackendRetention",
    "Checkpoint",
    "ConsumerState",
    "QuotaExplainer",
    "RetentionState",
    "TruncationPoint",
    "time_tick_lag_ms",
    "truncation_target",
    "validate_consumer_name",
]


def validate_consumer_name(name: str) -> str:
    """Consumer names follow channel names' rules (they name broker objects too)."""
    if not isinstance(name, str) or not CHANNEL_NAME_PATTERN.match(name):
        raise InvalidInputError(
            f"invalid consumer name {name!r}: use 1-200 of [A-Za-z0-9_.-], "
            "starting with a letter or digit"
        )
    return name


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What ``consumer`` has persisted: up to ``message_id`` (inclusive), at ``time_tick``."""

    consumer: str
    message_id: MessageId
    time_tick: int

    def __post_init__(self) -> None:
        validate_consumer_name(self.consumer)
        if not isinstance(self.message_id, MessageId):
            raise InvalidInputError(f"a checkpoint needs a message id, got {self.message_id!r}")
        if not isinstance(self.time_tick, int) or self.time_tick < 0:
            raise InvalidInputError(f"time tick must be an int >= 0, got {self.time_tick!r}")


@dataclass(frozen=True, slots=True)
class ConsumerState:
    """A registered consumer: its checkpoint and what the log holds after it.

    ``backlog_messages`` / ``backlog_bytes``: ``None`` where the backend cannot tell. On
    Pulsar they are the broker's subscription backlog, which counts entries: a batch of
    messages counts once.
    """

    checkpoint: Checkpoint
    backlog_messages: int | None = None
    backlog_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class TruncationPoint:
    """What a channel's truncations have discarded: everything before ``before`` (the
    retention rounds) and everything up to and including ``through`` (a truncate to
    an id). Either may be ``None``."""

    before: MessageId | None = None
    through: MessageId | None = None

    def covers(self, message_id: MessageId) -> bool:
        """``message_id`` is truncated: a read from it is refused, ``all`` skips it."""
        return (self.before is not None and message_id < self.before) or (
            self.through is not None and message_id <= self.through
        )

    def covers_after(self, message_id: MessageId) -> bool:
        """A read after ``message_id`` (exclusive) would start at a truncated message:
        after ``through`` itself is the first message kept."""
        return (self.before is not None and message_id < self.before) or (
            self.through is not None and message_id < self.through
        )

    def error(self, channel: str, asked: MessageId) -> TruncatedError:
        """The refusal of a read (or checkpoint) at ``asked``."""
        if self.through is not None and (self.before is None or self.through >= self.before):
            return TruncatedError(channel, asked, self.through, through=True)
        return TruncatedError(channel, asked, self.before)


@dataclass(frozen=True, slots=True)
class RetentionState:
    """A channel's truncation point, storage and registered consumers."""

    truncated_before: MessageId | None = None
    storage_bytes: int | None = None
    consumers: list[ConsumerState] = field(default_factory=list)
    #: the last message a truncate to an id discarded (inclusive)
    truncated_through: MessageId | None = None

    @property
    def point(self) -> TruncationPoint:
        return TruncationPoint(self.truncated_before, self.truncated_through)

    def checkpoint_of(self, consumer: str) -> Checkpoint | None:
        for state in self.consumers:
            if state.checkpoint.consumer == consumer:
                return state.checkpoint
        return None

    @property
    def slowest(self) -> ConsumerState | None:
        if not self.consumers:
            return None
        return min(self.consumers, key=lambda c: c.checkpoint.message_id)


@runtime_checkable
class BackendRetention(Protocol):
    """Checkpoints and truncation on one channel's log; safe from any node."""

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Record ``checkpoint`` durably (it survives changes of owner); raise
        :class:`~streamwal.errors.TruncatedError` if it lies before the truncation point."""
        ...

    async def remove_checkpoint(self, consumer: str) -> None:
        """Unregister ``consumer``: it no longer holds truncation back."""
        ...

    async def retention_state(self) -> RetentionState: ...

    async def truncation(self) -> TruncationPoint:
        """What the truncations discarded, alone: what a read must skip, without the
        storage and every consumer's checkpoint :meth:`retention_state` gathers."""
        ...

    async def position_at(self, publish_time_ms: int) -> MessageId | None:
        """The first entry published at or after ``publish_time_ms`` (the last entry if
        all are older); ``None`` when no entry is older (nothing to drop) or the log is
        empty."""
        ...

    async def truncate(self, before: MessageId) -> None:
        """Let the log drop everything before ``before``; record it as the truncation
        point first, so no read before it is answered from here on."""
        ...

    async def truncate_through(self, through: MessageId) -> None:
        """Let the log drop every message up to and including ``through`` (an entry
        only once all its messages are); record it first, as :meth:`truncate` does.
        The caller has checked that ``through`` is a message of this log."""
        ...

    async def locate(self, message_id: MessageId) -> None:
        """Return if ``message_id`` names a message of this log; else
        :class:`~streamwal.errors.InvalidInputError` (another channel's id, one past
        the end, another backend's)."""
        ...

    async def message_before(self, message_id: MessageId) -> MessageId | None:
        """The id of the last message before ``message_id`` still kept; ``None`` if
        none is."""
        ...


@runtime_checkable
class QuotaExplainer(Protocol):
    """A backend that can say which quota blocks it and what holds the backlog back."""

    async def explain_quota(self, error: QuotaExceededError) -> QuotaExceededError:
        """``error`` with the quota and the largest backlog's holder named; never raises."""
        ...


def truncation_target(
    state: RetentionState, retention_boundary: MessageId | None
) -> MessageId | None:
    """Where to truncate: before the slowest checkpoint and the retention boundary
    (the first entry still inside the window), whichever is older; ``None``: nowhere
    new (nothing to drop, or no further than the current truncation point).

    ``retention_boundary`` is ``None`` when no entry is old enough to drop.
    """
    if retention_boundary is None:
        return None
    target = retention_boundary
    slowest = state.slowest
    if slowest is not None and slowest.checkpoint.message_id < target:
        target = slowest.checkpoint.message_id
    if state.truncated_before is not None and target <= state.truncated_before:
        return None
    if state.truncated_through is not None and target <= state.truncated_through:
        return None  # a truncate to an id went further already
    return target


def time_tick_lag_ms(latest: int, checkpoint: int) -> int:
    """How far (in the TSO's physical milliseconds) a checkpoint is behind ``latest``."""
    return max(0, (latest >> 18) - (checkpoint >> 18))
