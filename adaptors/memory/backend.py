"""In-process logs with the same ownership rules as Pulsar's ``ExclusiveWithFencing``.

One :class:`MemoryLogStore` plays the broker; several :class:`MemoryOpener` on it play
several nodes. Taking ownership bumps the log's epoch, so any earlier owner's next
append fails with :class:`~streamwal.errors.ChannelFencedError`, exactly like a fenced
Pulsar producer. :class:`MemoryFaults` injects failures for retry tests.
"""

from __future__ import annotations

import asyncio
import bisect
import struct
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from streamwal.errors import (
    ChannelFencedError,
    ClosedError,
    DecodeError,
    InvalidInputError,
    NoSuchChannelError,
    OutcomeUnknownError,
    TruncatedError,
    UnavailableError,
)
from streamwal.wal.backend import (
    AccessMode,
    AppendCallback,
    BackendMessage,
    DeliveryPolicy,
    validate_channel_name,
)
from streamwal.wal.message_id import MessageId
from streamwal.wal.retention_contract import (
    Checkpoint,
    ConsumerState,
    RetentionState,
    TruncationPoint,
)

__all__ = ["MemoryBackendWAL", "MemoryFaults", "MemoryLogStore", "MemoryMessageId", "MemoryOpener"]

_ID_FORMAT = struct.Struct(">Q")
_PACK_ID_FORMAT = struct.Struct(">Qi")


class MemoryMessageId(MessageId):
    """The offset of an entry in its in-memory log, and for a message of a pack of
    several (log format v2) its index in the pack (``-1``: the entry itself)."""

    __slots__ = ("index", "offset")

    def __init__(self, offset: int, index: int = -1) -> None:
        self.offset = offset
        self.index = index

    def sort_key(self) -> tuple[int, ...]:
        return (self.offset, self.index)

    def in_pack(self, index: int) -> MemoryMessageId:
        return MemoryMessageId(self.offset, index)

    def follows_in_entry(self, previous: MessageId) -> bool:
        """Same offset, index one more (the 12-byte form ends with it)."""
        return (
            type(previous) is MemoryMessageId
            and previous.index >= 0
            and self.index == previous.index + 1
            and self.offset == previous.offset
        )

    def to_bytes(self) -> bytes:
        if self.index < 0:
            return _ID_FORMAT.pack(self.offset)
        return _PACK_ID_FORMAT.pack(self.offset, self.index)

    @classmethod
    def from_bytes(cls, data: bytes) -> MemoryMessageId:
        if len(data) == _PACK_ID_FORMAT.size:
            offset, index = _PACK_ID_FORMAT.unpack(data)
            if index < 0:
                raise DecodeError(f"memory message id: index {index} of a pack")
            return cls(offset, index)
        if len(data) != _ID_FORMAT.size:
            raise DecodeError(
                f"memory message id must be {_ID_FORMAT.size} or {_PACK_ID_FORMAT.size} "
                f"bytes, got {len(data)}"
            )
        return cls(_ID_FORMAT.unpack(data)[0])

    def __str__(self) -> str:
        if self.index < 0:
            return f"mem:{self.offset}"
        return f"mem:{self.offset}:{self.index}"


@dataclass
class MemoryFaults:
    """Failures to inject; each counter is consumed one failure at a time."""

    fail_ensure_writable: int = 0
    fail_appends: int = 0
    append_delay: float = 0.0
    #: appends persisted and then answered OutcomeUnknownError (an ambiguous failure)
    lose_answers: int = 0


@dataclass
class _Log:
    entries: list[BackendMessage] = field(default_factory=list)
    epoch: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: entries before this offset are truncated (kept in the list, never read again)
    truncated_before: int = 0
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    #: when each entry was appended (milliseconds since the epoch), for position_at
    appended_ms: list[int] = field(default_factory=list)

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class MemoryLogStore:
    """The shared 'broker': every opener on one store sees the same logs."""

    def __init__(
        self, max_message_size: int = 5 * 1024 * 1024, max_entry_bytes: int | None = None
    ) -> None:
        self.max_message_size = max_message_size
        #: what the WAL may put in one entry before it chunks a message
        #: (streamwal.wal.chunking); None: it never chunks, and a payload over
        #: ``max_message_size`` is refused. Small values let tests chunk small payloads.
        self.max_entry_bytes = max_entry_bytes
        self.faults = MemoryFaults()
        self._logs: dict[str, _Log] = {}

    def log(self, channel: str) -> _Log:
        return self._logs.setdefault(channel, _Log())

    def exists(self, channel: str) -> bool:
        """Whether an owner ever opened ``channel`` (a reader alone leaves it absent)."""
        log = self._logs.get(channel)
        return log is not None and (log.epoch > 0 or bool(log.entries))

    def entries(self, channel: str) -> list[BackendMessage]:
        """A snapshot of one log, for assertions."""
        return list(self.log(channel).entries)


class MemoryScanner:
    """Reads one in-memory log from a position onwards, waiting for new entries."""

    def __init__(
        self,
        log: _Log,
        position: int,
        on_close: Callable[[MemoryScanner], None] = lambda _: None,
    ) -> None:
        self._log = log
        self._position = position
        self._closed = False
        self._on_close = on_close

    def __aiter__(self) -> AsyncIterator[BackendMessage]:
        return self

    async def __anext__(self) -> BackendMessage:
        while True:
            if self._closed:
                raise ClosedError("scanner closed")
            if self._position < len(self._log.entries):
                entry = self._log.entries[self._position]
                self._position += 1
                return entry
            await self._log.changed.wait()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(self)
        self._log.notify()


class MemoryBackendWAL:
    """One channel of a :class:`MemoryLogStore`."""

    def __init__(self, store: MemoryLogStore, channel: str, mode: AccessMode) -> None:
        self._store = store
        self.channel: Final = channel
        self.access_mode: Final = mode
        self._log = store.log(channel)
        self._epoch: int | None = None
        self._fenced: ChannelFencedError | None = None
        self._closed = False
        self._scanners: set[MemoryScanner] = set()

    @property
    def max_entry_bytes(self) -> int | None:
        return self._store.max_entry_bytes

    def write_packs(self) -> int:
        """Every submit is an entry of its own here: packs of several messages may go,
        within the store's limits (less room for the frame's pack header)."""
        limit = self._store.max_message_size
        if self._store.max_entry_bytes is not None:
            limit = min(limit, self._store.max_entry_bytes)
        return max(limit - 1024, 0)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"channel {self.channel!r} is closed")

    @property
    def is_fenced(self) -> bool:
        """This backend's own record: a newer owner took the log from this writer."""
        return self._fenced is not None

    def _check_not_fenced(self) -> None:
        """The one place this writer learns it was fenced: a newer epoch of the log."""
        if self._fenced is None and self._epoch is not None and self._epoch != self._log.epoch:
            self._fenced = ChannelFencedError(self.channel, "a newer owner took the log")
        if self._fenced is not None:
            raise self._fenced

    async def ensure_writable(self) -> None:
        self._check_open()
        if self.access_mode is not AccessMode.READ_WRITE:
            raise InvalidInputError(f"channel {self.channel!r} was opened read-only")
        self._check_not_fenced()
        if self._store.faults.fail_ensure_writable > 0:
            self._store.faults.fail_ensure_writable -= 1
            raise UnavailableError("injected: backend unreachable")
        if self._epoch is None:
            self._log.epoch += 1
            self._epoch = self._log.epoch

    def submit(self, payload: bytes, properties: Mapping[str, str], done: AppendCallback) -> None:
        # persisted now, in call order; answered on a later loop iteration, as a broker
        # would (an appender that never suspends would starve the loop)
        message_id: MessageId | None = None
        error: BaseException | None = None
        try:
            message_id = self._append_now(payload, properties)
        except Exception as exc:
            error = exc
        if error is None and self._store.faults.lose_answers > 0:
            self._store.faults.lose_answers -= 1
            message_id, error = None, OutcomeUnknownError("injected: the answer was lost")
        loop = asyncio.get_running_loop()
        delay = self._store.faults.append_delay
        if delay <= 0:
            loop.call_soon(done, message_id, error)
        else:
            loop.call_later(delay, done, message_id, error)

    def _append_now(self, payload: bytes, properties: Mapping[str, str]) -> MessageId:
        self._check_open()
        self._check_not_fenced()
        if self._epoch is None:
            raise UnavailableError(
                f"channel {self.channel!r} has no writer; call ensure_writable first"
            )
        if len(payload) > self._store.max_message_size:
            raise InvalidInputError(
                f"payload of {len(payload)} bytes exceeds the maximum message size "
                f"of {self._store.max_message_size} bytes"
            )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
            raise InvalidInputError(f"append on {self.channel!r}: properties must be str: str")
        if self._store.faults.fail_appends > 0:
            self._store.faults.fail_appends -= 1
            raise UnavailableError("injected: append failed")
        message_id = MemoryMessageId(len(self._log.entries))
        self._log.entries.append(BackendMessage(message_id, bytes(payload), dict(properties)))
        self._log.appended_ms.append(int(time.time() * 1000))
        self._log.notify()
        return message_id

    async def read(self, policy: DeliveryPolicy) -> MemoryScanner:
        self._check_open()
        position = self._position_for(policy)
        scanner = MemoryScanner(self._log, position, on_close=self._scanners.discard)
        self._scanners.add(scanner)
        return scanner

    def _position_for(self, policy: DeliveryPolicy) -> int:
        if policy.kind == DeliveryPolicy.ALL:
            return self._log.truncated_before
        if policy.kind == DeliveryPolicy.LATEST:
            return len(self._log.entries)
        message_id = policy.message_id
        if policy.kind in (DeliveryPolicy.START_FROM, DeliveryPolicy.START_AFTER):
            if not isinstance(message_id, MemoryMessageId):
                raise InvalidInputError(f"{message_id!r} is not a memory message id")
            if message_id.offset >= len(self._log.entries):
                raise InvalidInputError(f"message id {message_id} is not in {self.channel!r}")
            first = message_id.offset + (policy.kind == DeliveryPolicy.START_AFTER)
            if first < self._log.truncated_before:
                raise TruncatedError(
                    self.channel, message_id, MemoryMessageId(self._log.truncated_before)
                )
            offset = message_id.offset
            if policy.kind == DeliveryPolicy.START_FROM or message_id.index >= 0:
                return offset  # a message inside a pack: its entry, which the WAL unpacks
            return offset + 1
        raise InvalidInputError(f"the memory backend cannot read from {policy}")

    # ---- BackendRetention: the log keeps its own checkpoints --------------------------
    def _truncation_point(self) -> MemoryMessageId | None:
        before = self._log.truncated_before
        return MemoryMessageId(before) if before else None

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._check_open()
        point = self._truncation_point()
        # resuming after a checkpoint reads from the next message: that one must be kept
        if point is not None and self._offset_of(checkpoint.message_id) + 1 < point.offset:
            raise TruncatedError(self.channel, checkpoint.message_id, point)
        self._log.checkpoints[checkpoint.consumer] = checkpoint

    async def remove_checkpoint(self, consumer: str) -> None:
        self._check_open()
        self._log.checkpoints.pop(consumer, None)

    async def retention_state(self) -> RetentionState:
        self._check_open()
        log = self._log
        consumers = [
            ConsumerState(c, len(log.entries) - 1 - c.message_id.offset)  # type: ignore[attr-defined]
            for c in sorted(log.checkpoints.values(), key=lambda c: c.consumer)
        ]
        kept = sum(len(e.payload) for e in log.entries[log.truncated_before :])
        return RetentionState(self._truncation_point(), kept, consumers)

    async def truncation(self) -> TruncationPoint:
        self._check_open()
        return TruncationPoint(self._truncation_point())

    async def position_at(self, publish_time_ms: int) -> MessageId | None:
        self._check_open()
        stamps = self._log.appended_ms
        if not stamps:
            return None
        offset = bisect.bisect_left(stamps, publish_time_ms)
        if offset <= self._log.truncated_before:
            return None  # nothing kept is older than the time
        return MemoryMessageId(min(offset, len(stamps) - 1))

    async def truncate(self, before: MessageId) -> None:
        self._check_open()
        if not isinstance(before, MemoryMessageId):
            raise InvalidInputError(f"{before!r} is not a memory message id")
        self._log.truncated_before = max(self._log.truncated_before, before.offset)

    async def truncate_through(self, through: MessageId) -> None:
        """The next entry is the first kept, or ``through``'s own when it names a message
        inside a pack (conservative: an entry goes only when all its messages may)."""
        offset = self._offset_of(through)
        inside = isinstance(through, MemoryMessageId) and through.index >= 0
        await self.truncate(MemoryMessageId(offset if inside else offset + 1))

    async def locate(self, message_id: MessageId) -> None:
        self._check_open()
        if self._offset_of(message_id) >= len(self._log.entries):
            raise InvalidInputError(f"message id {message_id} is not in {self.channel!r}")

    async def message_before(self, message_id: MessageId) -> MessageId | None:
        offset = self._offset_of(message_id) - 1
        return MemoryMessageId(offset) if offset >= self._log.truncated_before else None

    def _offset_of(self, message_id: MessageId) -> int:
        if not isinstance(message_id, MemoryMessageId):
            raise InvalidInputError(f"{message_id!r} is not a memory message id")
        return message_id.offset

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for scanner in list(self._scanners):
            await scanner.close()


class MemoryOpener:
    """Plays one node's connection to the shared :class:`MemoryLogStore`."""

    name = "memory"

    def __init__(self, store: MemoryLogStore | None = None) -> None:
        self.store = store if store is not None else MemoryLogStore()
        self._closed = False

    async def open(self, channel: str, mode: AccessMode) -> MemoryBackendWAL:
        if self._closed:
            raise ClosedError("opener closed")
        validate_channel_name(channel)
        return MemoryBackendWAL(self.store, channel, mode)

    def message_id_from_bytes(self, data: bytes) -> MemoryMessageId:
        return MemoryMessageId.from_bytes(data)

    async def require_channel(self, channel: str) -> None:
        """The :class:`~streamwal.wal.backend.ChannelDirectory` check."""
        validate_channel_name(channel)
        if not self.store.exists(channel):
            raise NoSuchChannelError(channel, "no log of that name in the in-process store")

    async def close(self) -> None:
        self._closed = True
