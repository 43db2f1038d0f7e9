"""Publishes appends in log order, whatever order their results arrive in.

Each message handed to the backend takes a slot, in the order it was handed over,
which is the log order. A slot is resolved when the backend answers; the resolved
slots at the head are then released in order: persisted messages are published (and
become the last-confirmed id of what is allocated next), failed ones are dropped,
in-memory time ticks are published after everything enqueued before them; a failed
slot whose outcome is unknown is reported (``on_unknown``: the write-ahead buffer marks
a gap there, so tailing readers look for it in the backend). A
published time tick T therefore guarantees that every message below T that will ever
be persisted by this owner has been published (a failed one is retried with a fresh,
higher time tick). Each slot's ``done`` future is resolved at its release, after the
publication: an append returns only once its message is in MVCC and the write-ahead
buffer, and appends return in log order. This is the ``ack`` manager of Milvus's
time-tick interceptor.
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

    ``message`` is the caller's unstamped message; ``time_tick`` and ``last_confirmed``
    are the stamps it was encoded with.
    """

    __slots__ = ("done", "error", "last_confirmed", "message", "message_id", "state", "time_tick")

    def __init__(
        self,
        time_tick: int,
        message: MutableMessage | None,
        last_confirmed: MessageId | None,
        state: SlotState,
        done: asyncio.Future[MessageId] | None,
    ) -> None:
        self.time_tick = time_tick
        self.message = message
        self.last_confirmed = last_confirmed
        self.state = state
        self.message_id: MessageId | None = None
        self.error: BaseException | None = None
        self.done = done
        """Resolved at release: the id once published, or the backend's error."""


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

    def reserve(
        self, time_tick: int, message: MutableMessage
    ) -> tuple[Slot, asyncio.Future[MessageId]]:
        """A slot for ``message`` about to be handed to the backend at ``time_tick``.

        Its last-confirmed id is :attr:`confirmed_for_next` as of now. The future
        resolves at the slot's release.
        """
        done: asyncio.Future[MessageId] = self._loop.create_future()
        slot = Slot(time_tick, message, self.confirmed_for_next, SlotState.PENDING, done)
        self._slots.append(slot)
        return slot, done

    def reserve_time_tick(self, time_tick: int) -> None:
        """An in-memory time tick, published once everything before it is released."""
        self._slots.append(Slot(time_tick, None, None, SlotState.IN_MEMORY, None))
        self._release()

    def resolve(
        self, slot: Slot, message_id: MessageId | None, error: BaseException | None
    ) -> None:
        """The backend's answer for ``slot``, once (the writer keeps out a second one)."""
        if error is not None or message_id is None:
            slot.error = error or UnavailableError("the backend answered without an id")
            slot.state = SlotState.FAILED
        else:
            slot.message_id = message_id
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
                if slot.message is not None and slot.message_id is not None:
                    self.last_confirmed = slot.message_id
                    self._sink.publish(
                        slot.message.persisted_as(
                            slot.message_id,
                            slot.time_tick,
                            slot.last_confirmed,
                            self._node_id,
                            self._term,
                        )
                    )
                elif slot.state is SlotState.IN_MEMORY:
                    self._sink.publish_time_tick(slot.time_tick)
                elif (
                    self._on_unknown is not None
                    and slot.error is not None
                    and outcome_of(slot.error) is WriteOutcome.UNKNOWN
                ):
                    self._on_unknown(slot.time_tick)  # it may be in the log: say so
            except Exception:  # a hook bug must not stop the log order for everyone else
                _log.exception(
                    "channel %s: publishing time tick %d failed", self._channel, slot.time_tick
                )
            _settle(slot)


def _settle(slot: Slot) -> None:
    done = slot.done
    if done is None or done.done():  # nobody waits, or its waiter was cancelled
        return
    if slot.message_id is not None:
        done.set_result(slot.message_id)
    elif slot.error is not None:
        done.set_exception(slot.error)
