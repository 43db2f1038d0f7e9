"""Noticing a fence the client does not report: a writer that gets no answers while
another producer writes the topic.

An old owner learns of a takeover when the broker refuses its producer. That needs the
producer to reach the topic's broker; when the topic moves to another broker during
the takeover, the C++ client may look the topic up while its bundle is being unloaded,
fail, and not try again until its send timeout (30 s by default) fails what was
pending, with an unknown outcome. Meanwhile the channel's writers wait, and the
channel looks owned.

So while appends are in flight and no receipt has come for ``STALL_S``, the watch
reads the topic's last message on the channel's reading client, which looks the topic
up afresh. A message of another producer after this owner's first entry means another
owner writes the topic: the channel is fenced at once (later appends fail fast). Its
producer is then closed, so nothing more of it can land, and the log after the last
position this owner placed is read: when none of this producer's messages are there,
what it had in flight is answered as not written; otherwise (or when the log cannot be
read) with an unknown outcome. Receipts wait while that read runs, as for a
read-back (:mod:`.readback`), and like a read-back it starts over on a fresh reader
when one hangs or fails: the topic may be moving, which is when readers hang. The look
itself waits ``STALL_S`` for each step at first, twice as long at each next look of the
stall, up to the operation timeout: a hung look is given up soon and the next one makes
a fresh reader, while a slow lookup still gets its time. A read after the fence that
keeps finding messages for the operation timeout (a new owner writing fast) ends there,
with an unknown outcome, as before: it is not started again.

Both this and the case below rely on the C++ client failing what a producer still
holds, through its callbacks, as soon as the producer is closed
(``ProducerImpl::closeAsync`` in pulsar-client 3.x): its send timer stops there.

A writer that gets no answer before its first entry has landed has nothing of its own
to compare the log with: the broker may hold it as a producer that the client no
longer talks to (seen while the topic moved during a takeover: every first time tick
timed out on it, and the open retried on the same producer for minutes). After the
operation timeout without a receipt it is closed, what it held fails with an unknown
outcome, and the next ``ensure_writable`` fences and makes a new writer.

The watch costs nothing while the channel is idle (it is armed when an append is
handed to the client with none in flight) and one timer per period while appends are
in flight; it reads the topic only during a stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
from typing import Any

import pulsar
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.closing import close_quietly
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.readback import ReadBack, reader_from, same_position
from streamwal.adaptors.pulsar.state import ChannelState, log
from streamwal.errors import ChannelFencedError, OutcomeUnknownError
from streamwal.timeouts import within

__all__ = ["PERIOD_S", "STALL_S", "FenceWatch"]

#: how long appends wait without any receipt before the watch reads the topic
STALL_S = 0.5
#: how often the watch looks at the receipts while appends are in flight
PERIOD_S = 0.25
#: the longest wait between two looks at the topic during one stall (each look that
#: finds nothing doubles the wait from ``STALL_S``: a broker that is down gets no storm
#: of readers from every stalled channel)
MAX_LOOK_WAIT_S = 4.0


class _NoEnd(Exception):
    """A read after the fence found messages for the operation timeout (see the module)."""


class FenceWatch:
    """Watches one writing channel for a stall under another producer (see the module)."""

    def __init__(self, state: ChannelState, readback: ReadBack) -> None:
        self._state = state
        self._readback = readback
        self._timer: asyncio.TimerHandle | None = None
        self._look: asyncio.Task[None] | None = None
        #: closes of writers given up on (kept referenced while they run)
        self._closing: set[asyncio.Task[None]] = set()
        #: the receipt count at the last tick, and since when it has not moved
        self._seen = 0
        self._since = 0.0
        #: looks of this stall that found nothing: each doubles the wait before the
        #: next look and what that look waits for each step (a reader, a message)
        self._fruitless = 0

    def arm(self) -> None:
        """Start ticking (an append was handed to the client with none in flight);
        ticking stops by itself once nothing is in flight."""
        if self._timer is not None or self._look is not None or self._done():
            return
        loop = asyncio.get_running_loop()
        self._seen = self._state.receipts
        self._since = loop.time()
        self._timer = loop.call_later(PERIOD_S, self._tick)

    def close(self) -> None:
        """Stop ticking and cancel a look (the channel closes)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._look is not None:
            self._look.cancel()

    async def aclose(self) -> None:
        """:meth:`close`, then wait for the look and the closes of abandoned writers."""
        self.close()
        tasks = [*self._closing, *([self._look] if self._look is not None else [])]
        await asyncio.gather(*tasks, return_exceptions=True)

    def _done(self) -> bool:
        return self._state.closed or self._state.fenced is not None

    def _tick(self) -> None:
        self._timer = None
        state = self._state
        if self._done() or state.in_flight == 0:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if state.receipts != self._seen:
            self._seen, self._since = state.receipts, now
            self._fruitless = 0
        elif now - self._since >= self._doubled(MAX_LOOK_WAIT_S) and state.first_landed is not None:
            self._look = loop.create_task(self._look_at_topic(state.first_landed))
            self._look.add_done_callback(self._looked)
            return
        elif state.first_landed is None and now - self._since >= state.config.operation_timeout_s:
            self._abandon(now - self._since)
            return
        self._timer = loop.call_later(PERIOD_S, self._tick)

    def _doubled(self, cap: float) -> float:
        """``STALL_S`` doubled for each fruitless look of this stall, up to ``cap``."""
        return min(math.ldexp(STALL_S, min(self._fruitless, 32)), cap)

    def _abandon(self, waited: float) -> None:
        """Give up on a writer that got no answer before its first entry landed (see
        the module): close it, so what it holds fails with an unknown outcome and the
        next ``ensure_writable`` makes a new one."""
        state = self._state
        producer, state.producer = state.producer, None
        if producer is None:
            return
        log.warning(
            "channel %s: the writer got no answer for %.1fs before its first entry landed; "
            "closing it, the next attempt makes a new one",
            state.channel,
            waited,
        )
        state.abandoned = OutcomeUnknownError(
            f"append on {state.channel!r}: the writer got no answer for {waited:.1f}s before "
            "its first entry landed and was closed; whether it landed is unknown"
        )
        closing = asyncio.get_running_loop().create_task(
            close_quietly(producer, state.config.operation_timeout_s)
        )
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    def _looked(self, task: asyncio.Task[None]) -> None:
        self._look = None
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error(
                "channel %s: the fence watch failed", self._state.channel, exc_info=task.exception()
            )
        if self._done() or self._state.in_flight == 0:
            return
        loop = asyncio.get_running_loop()
        # a look found nothing: wait longer before the next one, from now
        self._since = loop.time()
        self._fruitless += 1
        self._timer = loop.call_later(PERIOD_S, self._tick)

    async def _look_at_topic(self, first: PulsarMessageId) -> None:
        """Read the topic's last message; fence the channel if another producer wrote
        it after ``first`` (no conclusion when it cannot be read)."""
        state = self._state
        producer, ours = state.producer, state.writer_name
        if producer is None or ours is None:
            return
        # a reader created while the topic moves may never answer: the first look of a
        # stall waits STALL_S for each step, each next one twice as long, up to the
        # operation timeout (a slow lookup still gets its time)
        timeout = self._doubled(state.config.operation_timeout_s)
        try:
            async with reader_from(state, pulsar.MessageId.latest, timeout) as reader:
                if not await within(reader.has_message_available(), timeout):
                    return
                message = await within(reader.read_next(), timeout)
        except (PulsarException, TimeoutError) as exc:
            log.debug(
                "channel %s: the fence watch could not read the topic: %r", state.channel, exc
            )
            return
        writer = message.producer_name()
        at = PulsarMessageId.from_pulsar(message.message_id())
        if writer == ours or at.sort_key() <= first.sort_key() or self._done():
            return
        log.warning(
            "channel %s: no receipt for %.1fs while producer %s wrote at %s: fenced by a "
            "newer owner",
            state.channel,
            asyncio.get_running_loop().time() - self._since,
            writer,
            at,
        )
        state.fenced = ChannelFencedError(
            state.channel,
            f"producer {writer} wrote at {at} while this owner's producer got no answer",
        )
        self._readback.hold_receipts(self._ours_after_close(producer, ours), self._settled)

    async def _ours_after_close(self, producer: Any, name: str) -> list[PulsarMessageId] | None:
        """Close the producer (the client fails what it still holds at once, and
        nothing more of it can land), then the ids of its messages (``name``) after the
        last placed position, read to the log's end; ``None`` when that cannot be
        known (the close is bounded by the operation timeout, the reads together by
        the send timeout)."""
        state = self._state
        timeout = state.config.operation_timeout_s
        try:
            await within(producer.close(), timeout)
        except PulsarException:
            pass  # fenced or closed already: it sends nothing more either way
        except TimeoutError:
            return None
        after = state.last_landed
        if after is None:
            return None
        read = functools.partial(self._ours_since, after, name)
        with contextlib.suppress(PulsarException, TimeoutError, _NoEnd):
            return await self._readback.retrying(read, once_fenced=True)
        return None

    async def _ours_since(
        self, after: PulsarMessageId, name: str, timeout: float
    ) -> list[PulsarMessageId]:
        """The ids of ``name``'s messages after ``after``, read to the log's end; each
        step waits ``timeout`` at most. A reader may hang while the topic moves (the
        case this watch is for): the read-back's attempts on fresh readers
        (:meth:`ReadBack.retrying`) ask again."""
        ours: list[PulsarMessageId] = []
        # the log's end may run ahead of the read (a new owner writing): a read that
        # finds messages for the operation timeout ends there, not started again
        growing = asyncio.timeout(self._state.config.operation_timeout_s)
        async with reader_from(self._state, after, timeout) as reader:
            try:
                async with growing:
                    while await within(reader.has_message_available(), timeout):
                        message = await within(reader.read_next(), timeout)
                        landed = PulsarMessageId.from_pulsar(message.message_id())
                        if landed.sort_key() <= after.sort_key() or same_position(landed, after):
                            continue  # ``after`` itself: the reader starts there
                        if message.producer_name() == name:
                            ours.append(landed)
            except TimeoutError:
                if growing.expired():
                    raise _NoEnd(f"the log after {after} kept growing") from None
                raise
        return ours

    def _settled(self, task: asyncio.Task[list[PulsarMessageId] | None]) -> None:
        """Before the receipts that waited: say whether what failed was written."""
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error(
                "channel %s: reading the log after the fence failed; appends in flight are "
                "answered with an unknown outcome",
                self._state.channel,
                exc_info=task.exception(),
            )
            return
        found = task.result()
        if found is not None and not found:
            self._state.in_flight_unwritten = True
        log.info(
            "channel %s: after the fence the log holds %s of this owner's appends in flight",
            self._state.channel,
            "none" if found == [] else "an unknown number" if found is None else len(found),
        )
