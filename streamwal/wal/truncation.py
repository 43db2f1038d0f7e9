"""The owner's truncation rounds: report each consumer's lag, then truncate.

A round reads the channel's retention state (checkpoints, backlog, truncation point),
records each registered consumer's lag, finds the retention boundary (the first entry
published inside the window), and truncates before the older of that boundary and the
slowest checkpoint (:func:`streamwal.wal.retention_contract.truncation_target`). The loop runs every
``WALConfig.truncate_interval`` while ``retention`` is set; a failed round is logged
and the next one tries again (nothing is lost by truncating later).

A truncate to an id (:meth:`Truncator.to`) is the caller's rule instead of the window:
everything up to and including the id, held back by the slowest checkpoint as a round
is (a consumer keeps its checkpoint's message: resuming after it reads it first).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from streamwal.errors import BackendMismatchError, InvalidInputError, StreamwalError
from streamwal.tasks import RoundLoop
from streamwal.wal.backend import BackendWAL
from streamwal.wal.message_id import MessageId
from streamwal.wal.metrics import record_consumer_lag, record_truncation
from streamwal.wal.retention_contract import (
    BackendRetention,
    RetentionState,
    time_tick_lag_ms,
    truncation_target,
)

__all__ = ["Truncator", "retention_of"]

_log = logging.getLogger(__name__)


def retention_of(backend: BackendWAL, channel: str) -> BackendRetention:
    """``backend`` as a :class:`BackendRetention`, or a clear refusal."""
    if not isinstance(backend, BackendRetention):
        raise InvalidInputError(
            f"channel {channel!r}: its backend ({type(backend).__name__}) keeps no "
            "checkpoints and cannot truncate"
        )
    return backend


class Truncator(RoundLoop):
    """Owned by the WAL: ``start()`` once, ``close()`` cancels and awaits the loop."""

    #: a failure of another kind ends the loop (the WAL's close raises it)
    _round_errors = (StreamwalError,)
    _wait_first = True  # the first round one interval after the open

    def __init__(
        self,
        channel: str,
        backend: BackendWAL,
        retention: float | None,
        interval: float,
        latest_time_tick: Callable[[], int | None],
    ) -> None:
        self._channel = channel
        self._backend = backend
        self._retention = retention
        self._interval = interval
        self._latest_time_tick = latest_time_tick

    def start(self) -> None:
        if self._retention is None or not isinstance(self._backend, BackendRetention):
            return
        self._start_rounds()

    async def _round(self) -> None:
        await self.round()

    def _round_failed(self, exc: Exception) -> bool:
        _log.warning("channel %s: truncation round failed: %s", self._channel, exc)
        return True  # the next round tries again

    async def to(self, up_to: MessageId) -> MessageId | None:
        """Truncate through ``up_to`` (inclusive), or just before the slowest checkpoint
        if that is older; the last message id truncated, ``None`` if nothing new was
        (``up_to`` truncated already, or the clamp leaves nothing to drop).

        Raises :class:`~streamwal.errors.InvalidInputError` for an id that is not a
        message of this channel (another channel's, past the end, another backend's);
        nothing is truncated then.
        """
        backend = retention_of(self._backend, self._channel)
        if not isinstance(up_to, MessageId):
            raise InvalidInputError(f"truncate to what? {up_to!r} is not a message id")
        state = await backend.retention_state()
        point = state.point
        try:
            if point.covers(up_to):
                return None
        except BackendMismatchError as exc:
            raise InvalidInputError(f"channel {self._channel!r}: {exc}") from None
        await backend.locate(up_to)
        target = up_to
        slowest = state.slowest
        if slowest is not None and slowest.checkpoint.message_id <= up_to:
            before = await backend.message_before(slowest.checkpoint.message_id)
            if before is None or point.covers(before):
                _log.info(
                    "channel %s: truncate to %s held back by consumer %s at %s: nothing to drop",
                    self._channel,
                    up_to,
                    slowest.checkpoint.consumer,
                    slowest.checkpoint.message_id,
                )
                return None
            target = before
        await backend.truncate_through(target)
        record_truncation(self._channel)
        _log.info(
            "channel %s: truncated through %s (asked: %s%s)",
            self._channel,
            target,
            up_to,
            f", held back by consumer {slowest.checkpoint.consumer}"
            if slowest is not None and target != up_to
            else "",
        )
        return target

    async def round(self, retention: float | None = None) -> MessageId | None:
        """One round; returns the new truncation point, or ``None`` if it did not move."""
        window = retention if retention is not None else self._retention
        if window is None:
            raise InvalidInputError(
                f"channel {self._channel!r}: no retention window to truncate by "
                "(WALConfig.retention)"
            )
        backend = retention_of(self._backend, self._channel)
        state = await backend.retention_state()
        self._record_lag(state)
        boundary = await backend.position_at(int((time.time() - window) * 1000))
        target = truncation_target(state, boundary)
        if target is None:
            return None
        await backend.truncate(target)
        record_truncation(self._channel)
        slowest = state.slowest
        _log.info(
            "channel %s: truncated before %s (retention %gs%s)",
            self._channel,
            target,
            window,
            f", slowest consumer {slowest.checkpoint.consumer} at {slowest.checkpoint.message_id}"
            if slowest is not None
            else "",
        )
        return target

    def _record_lag(self, state: RetentionState) -> None:
        head = self._latest_time_tick()
        if head is None:  # no owner's view of the head yet (an open that truncates)
            return
        for consumer in state.consumers:
            record_consumer_lag(
                self._channel,
                consumer.checkpoint.consumer,
                consumer.backlog_messages,
                consumer.backlog_bytes,
                time_tick_lag_ms(head, consumer.checkpoint.time_tick),
            )

    async def close(self) -> None:
        await self._stop_rounds()
