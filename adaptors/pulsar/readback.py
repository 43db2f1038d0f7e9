"""The read-back guard: place appends whose receipts do not say where they landed.

A segment cut more than once: both edges landed, but not in a shape that places its
middle entries. The first edge is answered, the log between the edges is read back,
and the receipts that come meanwhile wait, because a foreign entry there means another
producer wrote between this owner's entries (the interleaving guard of :mod:`.state`).

Appends answered without a position (``-1:-1``: after a reconnect the client sent
them again and the broker's deduplication recognised copies of entries it holds):
the log is read on from the last position this owner placed. Every entry there is
this owner's (an exclusive producer, and the interleaving guard held up to that
position), in send order, so the next entries must hold these appends' payloads:
their ids are taken from there. If the log holds something else there (or seems to
end first until the send timeout), they are answered with an unknown position.

A read that fails or hangs on the way (a reader subscribing while its topic moves
between brokers can wait for ever for an answer the old owner never sends) starts over
on a fresh reader: reading is idempotent, and the alternative is an owner that stops
writing. Each attempt waits longer for every step than the one before
(:data:`FIRST_ATTEMPT_S` doubling up to ``operation_timeout_s``), and the attempts
together end within the send timeout (``send_timeout_ms``; ``0``: they go on until the
channel closes or is fenced), the time a receipt could have taken. An error that
asking again does not change (no such topic, not allowed, a closed client) ends the
read at once. The fence watch reads the log after a fence the same way
(:mod:`.fencewatch`); that read goes on although the channel is fenced, and with no
send timeout it ends after three operation timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.closing import close_quietly, reap
from streamwal.adaptors.pulsar.errors import LASTING_RESULTS, result_of
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.metrics import (
    READ_AGAIN,
    READ_AGAIN_AFTER_FENCE,
    READ_BACK,
    UNPLACED,
    record_segment,
)
from streamwal.adaptors.pulsar.segments import Segment
from streamwal.adaptors.pulsar.state import ChannelState, log
from streamwal.backoff import Backoff
from streamwal.errors import ChannelFencedError, UnknownPositionError
from streamwal.retry import Retry, RetryAttempt
from streamwal.timeouts import within
from streamwal.wal.backend import AppendCallback
from streamwal.wal.message_id import MessageId

__all__ = ["FIRST_ATTEMPT_S", "ReadBack", "reader_from", "same_position"]

_T = TypeVar("_T")

#: how long the first attempt of a read-back waits for each step (a reader, a
#: message) before it starts over; short, because receipts wait meanwhile
FIRST_ATTEMPT_S = 0.5
#: the pauses between a read-back's attempts
_AGAIN = Backoff(initial=0.02, maximum=1.0)
#: from this attempt on, each one that fails is logged as a warning
_WARN_FROM_ATTEMPT = 4
#: with no send timeout, a read after a fence gets this many operation timeouts
_FENCED_BUDGET_TIMEOUTS = 3


def _answer_guarded(
    done: AppendCallback, message_id: MessageId | None, error: BaseException | None
) -> None:
    """Call an append's callback where nothing else would catch what it raises."""
    try:
        done(message_id, error)
    except Exception:
        log.exception("an append's callback raised")


def _holds(message: Any, payload: bytes, properties: Mapping[str, str]) -> bool:
    """A read message is the append sent with ``payload`` and ``properties``."""
    return bool(message.data() == payload and message.properties() == dict(properties))


def same_position(landed: PulsarMessageId, receipt: PulsarMessageId) -> bool:
    """A read message is the one a receipt named (a receipt for the only message of a
    batch may carry no batch index)."""
    return (landed.ledger, landed.entry) == (receipt.ledger, receipt.entry) and (
        receipt.batch_index < 0 or landed.batch_index == receipt.batch_index
    )


#: reapers of readers created after their creation was given up on
_reapers: set[asyncio.Future[None]] = set()


@contextlib.asynccontextmanager
async def reader_from(
    state: ChannelState, start: PulsarMessageId | Any, timeout: float | None = None
) -> AsyncIterator[Any]:
    """A reader of the channel's topic from ``start`` (inclusive; a Pulsar id such as
    ``MessageId.latest`` too), on the channel's reading client, closed afterwards;
    its creation and its close are waited for ``timeout`` at most (default
    ``operation_timeout_s``; the client finishes either on its own after that)."""
    if timeout is None:
        timeout = state.config.operation_timeout_s
    at = start.to_pulsar() if isinstance(start, PulsarMessageId) else start
    creation = asyncio.ensure_future(
        state.client.create_reader(state.topic, at, start_message_id_inclusive=True)
    )
    try:
        reader = await within(asyncio.shield(creation), timeout)
    except (TimeoutError, asyncio.CancelledError):
        reap(creation, timeout, _reapers)  # the client goes on: close what it makes
        raise
    try:
        yield reader
    finally:
        await close_quietly(reader, timeout)  # a reader the broker forgot: nothing to release


class ReadBack:
    """Places appends by reading the log back; receipts wait while it reads."""

    def __init__(self, state: ChannelState) -> None:
        self._state = state
        #: reads placing appends, running
        self.tasks: set[asyncio.Task[list[PulsarMessageId] | None]] = set()
        #: receipts waiting for a read to finish (None: none is running)
        self._deferred: deque[Callable[[], None]] | None = None

    @property
    def deferring(self) -> bool:
        """A read is deciding what the log holds: receipts wait (:meth:`defer`)."""
        return self._deferred is not None

    def defer(self, receipt: Callable[[], None]) -> None:
        """Hold ``receipt`` back until the running read is done (:attr:`deferring`)."""
        assert self._deferred is not None
        self._deferred.append(receipt)

    def cancel(self) -> None:
        """Cancel the reads running now (a read cancelled before its first step never
        runs its body; its callback still answers what it held back)."""
        for task in self.tasks:
            task.cancel()

    async def close(self) -> None:
        """Cancel the reads; their callbacks answer what they held back and may start
        another read for a receipt that waited: until none is left."""
        while self.tasks:
            tasks = list(self.tasks)
            self.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def hold_receipts(
        self,
        read: Coroutine[Any, Any, list[PulsarMessageId] | None],
        then: Callable[[asyncio.Task[list[PulsarMessageId] | None]], None],
    ) -> None:
        """Run ``read`` while receipts wait, then ``then`` (with its task) and the
        receipts, in order; after the running read, if one runs (.fencewatch)."""
        if self.deferring:
            self.defer(functools.partial(self.hold_receipts, read, then))
            return

        def then_release(task: asyncio.Task[list[PulsarMessageId] | None]) -> None:
            try:
                then(task)
            finally:
                self._run_deferred()

        self._start(read, then_release)

    def _start(
        self,
        read: Coroutine[Any, Any, list[PulsarMessageId] | None],
        then: Callable[[asyncio.Task[list[PulsarMessageId] | None]], None],
    ) -> None:
        self._deferred = deque()
        task = asyncio.get_running_loop().create_task(read)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        # also when cancelled before its first step (close() in the same iteration)
        task.add_done_callback(then)

    def read_back(self, segment: Segment, first_id: Any, last_id: Any) -> bool:
        """Both edges landed, but not in a shape that places the middle (cut twice:
        the loop thread stalled for about the batching delay while sending it). Answer
        the first edge, and place the rest by reading the log between the edges;
        false if the edges cannot bound a read (no position, or not in log order).

        Until the read is done, later receipts wait (``_deferred``): what lies between
        the edges is the interleaving guard's question too, and a foreign entry there
        fences this owner before anything after it is acknowledged.
        """
        first = PulsarMessageId.from_pulsar(first_id)
        last = PulsarMessageId.from_pulsar(last_id)
        if first.ledger < 0 or first.entry < 0 or last.sort_key() <= first.sort_key():
            return False
        state = self._state
        dones = segment.dones
        error = state.check_landed(first)
        if error is not None:
            state.fail_all(dones, error)
            return True
        if dones[0] is not None:
            state.in_flight -= 1
            dones[0](first, None)
        rest = dones[1:]
        log.info(
            "channel %s: a segment of %d appends was cut more than once (%s .. %s); "
            "reading its middle back",
            state.channel,
            len(dones),
            first,
            last,
        )
        record_segment(state.channel, READ_BACK)
        self._start(
            self.retrying(
                functools.partial(
                    self._messages_between, first, last, segment.payloads, segment.properties
                )
            ),
            functools.partial(self._place_rest, rest, last),
        )
        return True

    def _place_rest(
        self,
        rest: list[AppendCallback | None],
        last: PulsarMessageId,
        task: asyncio.Task[list[PulsarMessageId] | None],
    ) -> None:
        """Answer a read-back segment's middle and last edge, then the receipts that
        waited for it, in order."""
        found: list[PulsarMessageId] | None = None
        if task.cancelled():
            outcome = "cancelled (the channel closed)"
        elif task.exception() is not None:
            outcome = f"failed: {task.exception()!r}"
        else:
            found = task.result()
            outcome = "placed" if found is not None else "not as sent"
        if found is not None:
            self._state.last_landed = last  # everything between the edges is ours
            answers: list[tuple[MessageId | None, BaseException | None]] = [
                (message_id, None) for message_id in [*found, last]
            ]
        else:
            log.warning(
                "channel %s: reading a cut segment back: %s; its appends are answered "
                "with an unknown position%s",
                self._state.channel,
                outcome,
                "" if self._state.closed else ", and this owner stops writing",
            )
            record_segment(self._state.channel, UNPLACED)
            unknown = UnknownPositionError(
                f"append on {self._state.channel!r}: its segment was cut more than once and "
                f"reading it back {outcome}; whether it landed is unknown"
            )
            if self._state.closed:
                # the guard cannot judge what lands after the gap, but nobody wrote
                # there for all we know: unknown, not fenced
                self._state.unverified = unknown
            elif self._state.fenced is None:
                # cannot show that no other producer wrote between our entries
                self._state.fenced = ChannelFencedError(
                    self._state.channel, f"the log between our entries up to {last} is {outcome}"
                )
            answers = [(None, unknown)] * len(rest)
        for done, (message_id, error) in zip(rest, answers, strict=True):
            if done is not None:
                self._state.in_flight -= 1
                _answer_guarded(done, message_id, error)
        self._run_deferred()

    def _run_deferred(self) -> None:
        """The receipts that waited for a read-back, in order."""
        deferred, self._deferred = self._deferred, None
        while deferred:
            if self._deferred is not None:  # another read-back began: keep the order
                self._deferred.extend(deferred)
                return
            try:
                deferred.popleft()()
            except Exception:  # one bad answer must not strand the receipts behind it
                log.exception("channel %s: handling a deferred receipt failed", self._state.channel)

    def place_unpositioned(
        self,
        dones: list[AppendCallback | None],
        payloads: list[bytes],
        properties: list[Mapping[str, str]],
        first_id: Any,
        last_id: Any,
    ) -> bool:
        """Read the log on from the last placed position to find appends answered
        without a position (see the module); ``first_id``/``last_id``: the first and
        last one's receipts, when they have a position. False when there is no known
        position to read from, or the channel is closing."""
        state = self._state
        after = state.last_landed
        if (
            after is None
            or state.closed
            or state.fenced is not None
            or state.unverified is not None
        ):
            return False
        edges = tuple(
            None if edge is None else PulsarMessageId.from_pulsar(edge)
            for edge in (first_id, last_id)
        )
        log.info(
            "channel %s: %d appends came back without a position (sent again after a "
            "reconnect); reading the log on from %s to place them",
            state.channel,
            len(dones),
            after,
        )
        record_segment(state.channel, READ_BACK)
        self._start(
            self.retrying(functools.partial(self._messages_after, after, payloads, properties)),
            functools.partial(self._place_found, dones, edges),
        )
        return True

    def _place_found(
        self,
        dones: list[AppendCallback | None],
        edges: tuple[PulsarMessageId | None, ...],
        task: asyncio.Task[list[PulsarMessageId] | None],
    ) -> None:
        found = None
        if not task.cancelled() and task.exception() is None:
            found = task.result()
        first, last = edges
        if found is not None and (
            (first is not None and not same_position(found[0], first))
            or (last is not None and not same_position(found[-1], last))
        ):
            found = None  # an edge's own receipt named another place
        error: BaseException | None = None
        if found is not None:
            error = self._state.check_landed(found[0])
        if found is None:
            outcome = (
                "cancelled (the channel closed)"
                if task.cancelled()
                else f"failed: {task.exception()!r}"
                if task.exception() is not None
                else "not found there"
            )
            log.warning(
                "channel %s: %d appends answered without a position: reading the log: %s; "
                "they are answered with an unknown position",
                self._state.channel,
                len(dones),
                outcome,
            )
            record_segment(self._state.channel, UNPLACED)
            self._state.last_landed = None  # what landed after it is unknown: the guard starts over
            error = UnknownPositionError(
                f"append on {self._state.channel!r}: the broker gave no position and reading the "
                f"log {outcome}; whether it landed is unknown"
            )
        elif error is None:
            self._state.last_landed = found[-1]
        for i, done in enumerate(dones):
            if done is None:
                continue
            self._state.in_flight -= 1
            if error is None:
                assert found is not None
                _answer_guarded(done, found[i], None)
            else:
                _answer_guarded(done, None, error)
        self._run_deferred()

    async def retrying(
        self, read: Callable[[float], Awaitable[_T]], *, once_fenced: bool = False
    ) -> _T:
        """``read(step_timeout)``, again on a fresh reader after a transient failure (a
        step timed out, or the client failed it with a result that may change) until
        it ends otherwise, the send timeout is spent, or the channel closes or is
        fenced (``once_fenced``: a read that runs because the channel was fenced goes
        on); see the module. The fence watch reads the log this way too."""
        state = self._state
        config = state.config
        loop = asyncio.get_running_loop()
        budget = config.send_timeout_ms / 1000
        if once_fenced and budget <= 0:
            # no send timeout: appends wait for ever for receipts, but a fenced
            # channel's answers must not wait on a log that cannot be read
            budget = _FENCED_BUDGET_TIMEOUTS * config.operation_timeout_s
        deadline = loop.time() + budget if budget > 0 else None
        step = min(FIRST_ATTEMPT_S, config.operation_timeout_s)

        def transient(exc: BaseException) -> bool:
            return not (
                result_of(exc) in LASTING_RESULTS
                or state.closed
                or (state.fenced is not None and not once_fenced)
            )

        def again(attempt: RetryAttempt) -> None:
            log.log(
                logging.WARNING if attempt.attempt >= _WARN_FROM_ATTEMPT else logging.INFO,
                "channel %s: reading the log back, attempt %d: %r; again on a fresh "
                "reader in %.2f s",
                state.channel,
                attempt.attempt,
                attempt.error,
                attempt.delay,
            )
            record_segment(state.channel, READ_AGAIN_AFTER_FENCE if once_fenced else READ_AGAIN)

        retry = Retry(
            _AGAIN, deadline=deadline, retry_if=transient, on_retry=again, clock=loop.time
        )
        while True:
            try:
                async with asyncio.timeout_at(deadline):  # the whole attempt, every step
                    return await read(step)
            except (TimeoutError, PulsarException) as exc:
                pause = retry.next(exc, margin=step)  # room for a whole next step
                if pause is None:
                    raise
            await retry.wait(pause)
            step = min(step * 2, config.operation_timeout_s)

    async def _messages_after(
        self,
        after: PulsarMessageId,
        payloads: list[bytes],
        properties: list[Mapping[str, str]],
        timeout: float,
    ) -> list[PulsarMessageId] | None:
        """The ids of the messages right after ``after`` if they hold ``payloads`` and
        ``properties`` in order (the properties carry each time tick: two appends of the
        same bytes differ); ``None`` if the log holds anything else there. Each step
        waits ``timeout`` at most. The broker said it holds them: a reader that finds
        the log ending first is behind, and the attempt ends as on a timeout."""
        found: list[PulsarMessageId] = []
        async with reader_from(self._state, after, timeout) as reader:
            skipped = False
            while len(found) < len(payloads):
                if not await within(reader.has_message_available(), timeout):
                    raise TimeoutError(f"the log read from {after} ends before appends it holds")
                message = await within(reader.read_next(), timeout)
                landed = PulsarMessageId.from_pulsar(message.message_id())
                if landed.sort_key() <= after.sort_key() or (
                    not skipped and same_position(landed, after)
                ):
                    skipped = True
                    continue  # ``after`` itself (the reader starts there, inclusive)
                at = len(found)
                if not _holds(message, payloads[at], properties[at]):
                    return None
                found.append(landed)
        return found

    async def _messages_between(
        self,
        first: PulsarMessageId,
        last: PulsarMessageId,
        payloads: list[bytes],
        properties: list[Mapping[str, str]],
        timeout: float,
    ) -> list[PulsarMessageId] | None:
        """The ids of the segment's middle messages as the log has them, reading from
        ``first`` to ``last`` (``payloads``: the whole segment's, edges included);
        ``None`` if the log holds anything else there (a missing or foreign message).
        Each step waits ``timeout`` at most."""
        found: list[PulsarMessageId] = []
        async with reader_from(self._state, first, timeout) as reader:
            for i, payload in enumerate(payloads):
                message = await within(reader.read_next(), timeout)
                landed = PulsarMessageId.from_pulsar(message.message_id())
                edge = first if i == 0 else last if i == len(payloads) - 1 else None
                if not _holds(message, payload, properties[i]):
                    return None
                if edge is not None:
                    if not same_position(landed, edge):
                        return None
                elif same_position(landed, last) or landed.sort_key() > last.sort_key():
                    return None  # the last edge came early: a middle message is missing
                else:
                    found.append(landed)
        return found
