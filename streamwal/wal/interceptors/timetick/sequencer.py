"""Publishes appends in log order, whatever order their results arrive in.

Each entry handed to the backend (a pack of one or more messages, log format v2)
takes a slot, in the order it was handed over, which is the log order. A slot is
resolved when the backend answers; the resolved slots at the head are then released
in order: a pack's persisted messages are published together (``publish_many``: each
log listener is told of all of them in one call, and still sees every one), each with
its id in the pack (the pack's last becomes the last-confirmed id of what is allocated
next), failed ones are dropped, in-memory time ticks are published after everything
enqueued before them; a failed slot whose outcome is unknown is reported (``on_unknown``: the
write-ahead buffer marks a gap there, so tailing readers look for it in the backend).
A published time tick T therefore guarantees that every message below T that will
ever be persisted by this owner has been published (a failed one is retried with a
fresh, higher time tick). Each slot's waiters (one future per call that put messages
in it, not one per message) are resolved at its release with the ids of the pack's
messages, after the publication: an append returns only once its message is in MVCC
and the write-ahead buffer, and appends return in log order. This is the ``ack``
manager of Milvus's time-tick interceptor.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable

from streamwal.errors import UnavailableError, WriteOutcome, outcome_of
from streamwal.wal.interceptors.base import Sink
from streamwal.wal.interceptors.holds import ConfirmHolds
from streamwal.wal.message import ImmutableMessage, MutableMessage
from streamwal.wal.message_id import MessageId

__all__ = ["AckSequencer", "Slot", "SlotState"]

_log = logging.getLogger(__name__)


class SlotState(enum.Enum):
    PENDING = "pending"
    PERSISTED = "persisted"
    FAILED = "failed"
    IN_MEMORY = "in-memory"


class Slot:
    """One entry handed to the backend (or an in-memory time tick), awaiting release.

    ``messages`` are the callers' unstamped messages of the entry's pack, in pack order,
    and ``time_ticks`` the time tick each was encoded with; ``time_tick`` is the
    first's; ``last_confirmed`` the pack's (shared by its messages). An open pack (the
    writer's) still takes messages; it is closed before it is handed over.
    """

    __slots__ = (
        "error",
        "last_confirmed",
        "message_ids",
        "messages",
        "state",
        "time_tick",
        "time_ticks",
        "waiters",
    )

    def __init__(
        self,
        time_tick: int,
        message: MutableMessage | None,
        last_confirmed: MessageId | None,
        state: SlotState,
    ) -> None:
        self.time_tick = time_tick
        self.messages: list[MutableMessage] = [] if message is None else [message]
        self.time_ticks: list[int] = [] if message is None else [time_tick]
        self.last_confirmed = last_confirmed
        self.state = state
        self.message_ids: list[MessageId] | None = None
        self.error: BaseException | None = None
        self.waiters: list[asyncio.Future[list[MessageId]]] = []
        """Resolved at release: the messages' ids once published, or the backend's error."""

    def waiter(self) -> asyncio.Future[list[MessageId]]:
        """A future of this slot's outcome for one caller (each awaits its own: a caller
        cancelled while it waits must not cancel the others' wait)."""
        future: asyncio.Future[list[MessageId]] = asyncio.get_running_loop().create_future()
        self.waiters.append(future)
        return future


class AckSequencer:
    """Single event loop; every method is synchronous."""

    def __init__(
        self,
        first: ImmutableMessage,
        sink: Sink,
        channel: str,
        node_id: int,
        holds: ConfirmHolds | None = None,
        on_unknown: Callable[[int], None] | None = None,
    ) -> None:
        self._sink = sink
        self._on_unknown = on_unknown
        self._holds = holds if holds is not None else ConfirmHolds()
        self._channel = channel
        self._node_id = node_id
        self._term = first.term
        self._slots: deque[Slot] = deque()
        self._loop = asyncio.get_running_loop()
        self.last_confirmed: MessageId = first.message_id
        """The id of the last released persisted message: all before it are resolved."""

    @property
    def confirmed_for_next(self) -> MessageId:
        """The last-confirmed id to stamp a message with now: :attr:`last_confirmed`,
        held back at the begin of the oldest transaction still open."""
        if not self._holds:
            return self.last_confirmed
        return self._holds.cap(self.last_confirmed)

    @property
    def in_flight(self) -> int:
        return len(self._slots)

    def reserve(self, time_tick: int, message: MutableMessage) -> Slot:
        """A slot for a pack starting with ``message`` at ``time_tick``, about to be
        handed to the backend (the writer may add messages to it until it hands it over).

        Its last-confirmed id is :attr:`confirmed_for_next` as of now.
        """
        slot = Slot(time_tick, message, self.confirmed_for_next, SlotState.PENDING)
        self._slots.append(slot)
        return slot

    def reserve_time_tick(self, time_tick: int) -> None:
        """An in-memory time tick, published once everything before it is released."""
        self._slots.append(Slot(time_tick, None, None, SlotState.IN_MEMORY))
        self._release()

    def resolve(
        self, slot: Slot, message_id: MessageId | None, error: BaseException | None
    ) -> None:
        """The backend's answer for ``slot`` (the entry's id), once (the writer keeps out
        a second one). A pack of one message has the entry's id, a pack of N > 1
        ids ``(entry, i)`` (``docs/wire-format.md``)."""
        if error is not None or message_id is None:
            slot.error = error or UnavailableError("the backend answered without an id")
            slot.state = SlotState.FAILED
        else:
            count = len(slot.messages)
            slot.message_ids = (
                [message_id]
                if count == 1
                else [message_id.in_pack(index) for index in range(count)]
            )
            slot.state = SlotState.PERSISTED
        self._release()

    def abandon(self, slot: Slot, error: BaseException) -> None:
        """The entry never reached the backend."""
        slot.error = error
        slot.state = SlotState.FAILED
        self._release()

    def _release(self) -> None:
        slots = self._slots
        while slots and slots[0].state is not SlotState.PENDING:
            slot = slots.popleft()
            try:
                ids = slot.message_ids
                if ids is not None:
                    self.last_confirmed = ids[-1]
                    confirmed = slot.last_confirmed
                    node_id, term = self._node_id, self._term
                    if len(ids) == 1:
                        self._sink.publish(
                            slot.messages[0].persisted_as(
                                ids[0], slot.time_tick, confirmed, node_id, term
                            )
                        )
                    else:  # a pack: its listeners are told of it at once
                        packed = zip(slot.messages, ids, slot.time_ticks, strict=True)
                        self._sink.publish_many(
                            [
                                message.persisted_as(message_id, tick, confirmed, node_id, term)
                                for message, message_id, tick in packed
                            ]
                        )
                elif slot.state is SlotState.IN_MEMORY:
                    self._sink.publish_time_tick(slot.time_tick)
                elif (
                    self._on_unknown is not None
                    and slot.error is not None
                    and outcome_of(slot.error) is WriteOutcome.UNKNOWN
                ):
                    self._on_unknown(slot.time_ticks[-1])  # it may be in the log: say so
            except Exception:  # a hook bug must not stop the log order for everyone else
                _log.exception(
                    "channel %s: publishing time tick %d failed", self._channel, slot.time_tick
                )
            _settle(slot)


def _settle(slot: Slot) -> None:
    ids, error = slot.message_ids, slot.error
    for done in slot.waiters:
        if done.done():  # its waiter was cancelled
            continue
        if ids is not None:
            done.set_result(ids)
        elif error is not None:
            done.set_exception(error)
