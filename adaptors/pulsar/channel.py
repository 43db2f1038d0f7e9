"""One channel (= one Pulsar topic) opened by a node.

Appends are handed to the C++ producer's ``send_async`` in call order, from the loop
thread, so the order of ``submit``/``append`` calls is the order in the log and
appends pipeline without a round trip each. Only the edges of each segment of appends
carry a send callback (:mod:`.segments`); receipts come back in bursts
(:mod:`.receipts`) and answer each entry's callback directly. A fencing result from
the broker marks the channel fenced for good: the producer is dropped and every later
append fails fast.

Taking a topic over (``ExclusiveWithFencing``, the default) is two steps. A Pulsar
4.0.7 broker reconnecting a fenced ``ExclusiveWithFencing`` producer first evicts the
current producers and only then checks the reconnecting one's topic epoch, against
the epoch before the update of a concurrent takeover has completed: it may accept it,
and the old owner's pending messages then land after the new owner's first time tick
(or the legitimate owner, evicted, resends a message already persisted). So a
short-lived fencer in ``ExclusiveWithFencing`` mode evicts every producer and moves
the epoch on (its creation returns once that epoch is stored) and is closed at once;
the producer that writes is created afterwards in ``Exclusive`` mode. A reconnecting
``Exclusive`` producer evicts nobody and is refused while any exclusive producer
exists or once the epoch moved: a fenced owner cannot come back.

Do not take one channel over from two nodes at the same time: the same broker can
deadlock its I/O threads when a producer's creation fences another producer that its
client is closing at that moment (lock order inversion between the topic and the
producer), which two overlapping takeovers make likely.

Interleaving guard: within one ledger, the entries of an exclusive producer are
consecutive. A receipt whose entry is further on than the next one means another
producer wrote in between: this producer was fenced and let back in (the race above;
kept as a second line of defence). Such an append is persisted after a newer owner's
messages, so it is answered as fenced (never acknowledged), and so is every later one.
A receipt without a position (``-1:-1``, seen under connection resets) is answered
with :class:`~streamwal.errors.UnknownPositionError`: neither acknowledged nor retried.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import _pulsar
import pulsar
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.config import PulsarAccessMode, PulsarConfig
from streamwal.adaptors.pulsar.errors import FENCING_RESULTS, after_send, translate
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.metrics import READ_BACK, UNPLACED, record_segment
from streamwal.adaptors.pulsar.receipts import ReceiptQueue
from streamwal.adaptors.pulsar.retention import RetentionDelegate, TopicRetention
from streamwal.adaptors.pulsar.scanner import PulsarScanner, to_backend_message
from streamwal.adaptors.pulsar.segments import (
    SEGMENT_BYTES,
    SEGMENT_MESSAGES,
    Edge,
    Prepared,
    Segment,
    positions,
    size_of,
)
from streamwal.wal.backend import AccessMode, AppendCallback, DeliveryPolicy, settle_future
from streamwal.errors import (
    ChannelFencedError,
    ClosedError,
    InvalidInputError,
    QuotaExceededError,
    StreamwalError,
    TruncatedError,
    UnavailableError,
    UnknownPositionError,
)
from streamwal.wal.message_id import MessageId

__all__ = ["PulsarBackendWAL"]


def _answer_guarded(
    done: AppendCallback, message_id: MessageId | None, error: BaseException | None
) -> None:
    """Call an append's callback where nothing else would catch what it raises."""
    try:
        done(message_id, error)
    except Exception:
        _log.exception("an append's callback raised")


def _same_position(landed: PulsarMessageId, receipt: PulsarMessageId) -> bool:
    """A read message is the one a receipt named (a receipt for the only message of a
    batch may carry no batch index)."""
    return (landed.ledger, landed.entry) == (receipt.ledger, receipt.entry) and (
        receipt.batch_index < 0 or landed.batch_index == receipt.batch_index
    )


_log = logging.getLogger(__name__)

_OWNER_PRESENT = frozenset({pulsar.Result.ProducerFenced, pulsar.Result.ProducerBusy})
_WRITER_ATTEMPTS = 10
_WRITER_RETRY_S = 0.05
_WRITER_RETRY_WINDOW_S = 3.0


class PulsarBackendWAL(RetentionDelegate):
    """A topic opened read-write (exclusive producer on demand) or read-only; its
    checkpoints and truncation are :mod:`.retention`'s."""

    def __init__(
        self,
        client: Any,
        config: PulsarConfig,
        channel: str,
        mode: AccessMode,
        before_first_write: Callable[[], Awaitable[None]],
        *,
        prepare_topic: Callable[[str, str, Awaitable[None] | None], Awaitable[None]],
        retention: TopicRetention | None = None,
        on_close: Callable[[PulsarBackendWAL], None] = lambda _: None,
        writer_client: Any = None,
    ) -> None:
        self._client = client
        #: the producers' own client (adaptors.pulsar.opener says why), closed last
        self._writer_client = writer_client
        self._config = config
        self._channel = channel
        self._topic = config.topic(channel)
        self._mode = mode
        self._before_first_write = before_first_write
        self._prepare_topic = prepare_topic
        self._retention = retention or TopicRetention(
            None, self._topic, channel, config.cursor_subscription
        )
        self._on_close = on_close
        self._producer: Any = None
        self._last_landed: PulsarMessageId | None = None
        self._fenced: ChannelFencedError | None = None
        #: closed while a read-back ran: the log after its first edge is unverified
        self._unverified: UnknownPositionError | None = None
        self._closed = False
        self._lock = asyncio.Lock()
        self._scanners: set[PulsarScanner] = set()
        #: the latest append, sent when the next one comes or the iteration ends
        self._held: Prepared | None = None
        #: the segment being sent (its first edge is out, its last is not yet)
        self._segment: Segment | None = None
        self._segment_bytes = 0
        #: reads placing the middle of a segment that was cut more than once
        self._readbacks: set[asyncio.Task[list[PulsarMessageId] | None]] = set()
        #: receipts waiting for a read-back to finish (None: none is running)
        self._deferred: deque[Callable[[], None]] | None = None
        self._receipts: ReceiptQueue[AppendCallback | Edge] = ReceiptQueue(self._on_receipt)
        #: appends handed to the client and not answered yet (pulsar.max_pending_messages)
        self._in_flight = 0

    @property
    def channel(self) -> str:
        return self._channel

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def access_mode(self) -> AccessMode:
        return self._mode

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"channel {self._channel!r} is closed")

    async def ensure_writable(self) -> None:
        self._check_open()
        if self._mode is not AccessMode.READ_WRITE:
            raise InvalidInputError(f"channel {self._channel!r} was opened read-only")
        async with self._lock:
            if self._fenced is not None:
                raise self._fenced
            if self._producer is not None:
                return
            await self._before_first_write()
            fencing = self._config.access_mode is PulsarAccessMode.EXCLUSIVE_WITH_FENCING
            try:
                await self._fence_and_prepare(fencing)
            except QuotaExceededError as exc:  # the fencer is a producer too
                raise await self.explain_quota(exc) from exc
            try:
                self._producer = await self._create_writer(retry_owner_present=fencing)
            except PulsarException as exc:
                if exc.error() in _OWNER_PRESENT:
                    if fencing:  # another node took the topic between our fence and now
                        self._fenced = ChannelFencedError(
                            self._channel, f"taken over during the open: broker says {exc.error()}"
                        )
                        raise self._fenced from exc
                    raise UnavailableError(
                        f"channel {self._channel!r}: an earlier owner still holds the topic "
                        "(access mode Exclusive waits for it to leave)"
                    ) from exc
                error = translate(exc, channel=self._channel, what="create producer")
                if isinstance(error, ChannelFencedError):
                    self._fenced = error
                if isinstance(error, QuotaExceededError):
                    error = await self.explain_quota(error)
                raise error from exc
            except TimeoutError as exc:
                raise UnavailableError(
                    f"channel {self._channel!r}: broker {self._config.service_url} did not "
                    f"answer within {self._config.operation_timeout_s:g}s"
                ) from exc
            _log.info("channel %s: exclusive producer created on %s", self._channel, self._topic)

    async def _fence_and_prepare(self, fencing: bool) -> None:
        """Fence (if ``fencing``) and prepare the topic (its durable cursor, its
        policies): the opener runs both side by side, and both are done before the
        writer exists, so the cursor is there before the first time tick."""
        await self._prepare_topic(
            self._channel, self._topic, self._fence_others() if fencing else None
        )

    async def _create_writer(self, *, retry_owner_present: bool) -> Any:
        """The writing producer (``Exclusive``); right after our own fence, the broker
        may still be removing the fencer: try again for a while (at least
        ``_WRITER_ATTEMPTS`` times, for up to ``_WRITER_RETRY_WINDOW_S`` or the
        operation timeout). A broker that has just restarted can take a second or more
        to let go of a fencer whose close it did not see; a real takeover by another
        node in the meantime is still reported as fenced, only later."""
        window = min(self._config.operation_timeout_s, _WRITER_RETRY_WINDOW_S)
        deadline = asyncio.get_running_loop().time() + window
        attempt = 0
        while True:
            attempt += 1
            try:
                return await asyncio.wait_for(
                    (self._writer_client or self._client).create_producer(
                        self._topic,
                        access_mode=pulsar.ProducerAccessMode.Exclusive,
                        batching_enabled=self._config.batching,
                        batching_max_publish_delay_ms=self._config.batching_max_delay_ms,
                        # room for many segments: one is cut at most once (.segments)
                        batching_max_messages=64 * SEGMENT_MESSAGES,
                        batching_max_allowed_size_in_bytes=8 * SEGMENT_BYTES,
                        max_pending_messages=self._config.max_pending_messages,
                        block_if_queue_full=False,
                        send_timeout_millis=self._config.send_timeout_ms,
                    ),
                    timeout=self._config.operation_timeout_s + 1,
                )
            except PulsarException as exc:
                out_of_time = asyncio.get_running_loop().time() >= deadline
                if (
                    exc.error() not in _OWNER_PRESENT
                    or not retry_owner_present
                    or (attempt >= _WRITER_ATTEMPTS and out_of_time)
                ):
                    raise
                await asyncio.sleep(_WRITER_RETRY_S)

    async def _fence_others(self) -> None:
        """Evict every producer of the topic and move its epoch on (see the module)."""
        try:
            fencer = await asyncio.wait_for(
                (self._writer_client or self._client).create_producer(
                    self._topic,
                    access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                    batching_enabled=False,
                ),
                timeout=self._config.operation_timeout_s + 1,
            )
        except PulsarException as exc:
            raise translate(exc, channel=self._channel, what="fence") from exc
        except TimeoutError as exc:
            raise UnavailableError(
                f"channel {self._channel!r}: broker {self._config.service_url} did not "
                f"answer the fence within {self._config.operation_timeout_s:g}s"
            ) from exc
        try:
            await asyncio.wait_for(fencer.close(), timeout=self._config.operation_timeout_s)
        except PulsarException as exc:
            if exc.error() not in FENCING_RESULTS:  # fenced already: gone from the topic
                raise translate(exc, channel=self._channel, what="fence") from exc
        except TimeoutError as exc:
            raise UnavailableError(
                f"channel {self._channel!r}: closing the fencer timed out"
            ) from exc

    def append(self, payload: bytes, properties: Mapping[str, str]) -> Awaitable[MessageId]:
        future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        self.submit(payload, properties, functools.partial(settle_future, future))
        return future

    def submit(self, payload: bytes, properties: Mapping[str, str], done: AppendCallback) -> None:
        try:
            self._enqueue(done, payload, properties)
        except Exception as exc:
            done(None, exc)

    def _enqueue(self, done: AppendCallback, payload: bytes, properties: Mapping[str, str]) -> None:
        self._check_open()
        if self._fenced is not None:
            raise self._fenced
        if self._producer is None:
            raise UnavailableError(
                f"channel {self._channel!r} has no producer; call ensure_writable first"
            )
        if len(payload) > self._config.max_message_size:
            raise InvalidInputError(
                f"payload of {len(payload)} bytes exceeds the broker's maximum message size "
                f"of {self._config.max_message_size} bytes"
            )
        limit = self._config.max_pending_messages
        if self._in_flight >= limit:
            raise UnavailableError(
                f"append on {self._channel!r}: {limit} appends are already in flight "
                "(pulsar.max_pending_messages)"
            )
        try:
            builder = _pulsar.MessageBuilder()
            builder.content(payload)
            builder.properties(properties)  # one call: one per property cost 1 us each
            message = builder.build()
        except TypeError as exc:  # not bytes / str properties: this entry only
            raise InvalidInputError(f"append on {self._channel!r}: {exc}") from None
        self._in_flight += 1
        held, self._held = self._held, (done, message, payload, size_of(payload, properties))
        if held is None:
            asyncio.get_running_loop().call_soon(self._end_iteration)
        else:
            self._send(held, last=False)

    def _end_iteration(self) -> None:
        """Send the append held back: the last of this event-loop iteration."""
        held, self._held = self._held, None
        if held is not None:
            self._send(held, last=True)

    def _send(self, entry: Prepared, *, last: bool) -> None:
        """Hand one append to the client, with a callback only if it is a segment edge.

        Appends go to the client as they come, so the producer's batching delay runs
        while later appenders still do their own work, but each is held back until the
        next one arrives or the loop iteration ends: only then is it known whether it
        is the last of its segment (:mod:`.segments`), which needs a callback.
        """
        done, message, payload, size = entry
        producer = self._producer
        segment = self._segment
        if producer is None:  # closed with this append accepted: close sends it first
            self._in_flight -= 1
            closed = ClosedError(f"channel {self._channel!r} is closed")
            done(None, closed)
            if segment is not None:  # its last edge will never be sent
                segment.broken = True
                segment.dones.append(None)
                segment.payloads.append(payload)
                self._segment = None
                if segment.record(True, closed):
                    self._resolve(segment)
            return
        # The producer of pulsar.asyncio exposes the C extension's producer; its
        # send_async enqueues synchronously, which is what orders the log.
        native = producer._producer
        if segment is None:
            if last or not self._config.batching:
                self._send_one(native, done, message)
                return
            segment = self._segment = Segment([done], [payload])
            self._segment_bytes = size
            edge: Edge | None = Edge(segment, is_last=False)
        else:
            segment.dones.append(done)
            segment.payloads.append(payload)
            self._segment_bytes += size
            if (
                last
                or len(segment.dones) >= SEGMENT_MESSAGES
                or self._segment_bytes >= SEGMENT_BYTES
            ):
                edge = Edge(segment, is_last=True)
                self._segment = None
            else:
                edge = None
        try:
            native.send_async(
                message, None if edge is None else functools.partial(self._receipts.put, edge)
            )
        except Exception as exc:  # the client refused it synchronously
            error = translate(exc, channel=self._channel, what="append")
            if edge is not None:
                self._on_refused_edge(edge, error)
            else:
                segment.broken = True
                segment.dones[-1] = None
                self._in_flight -= 1
                done(None, error)

    def _send_one(self, native: Any, done: AppendCallback, message: Any) -> None:
        try:
            native.send_async(message, functools.partial(self._receipts.put, done))
        except Exception as exc:  # the client refused it synchronously
            self._in_flight -= 1
            done(None, translate(exc, channel=self._channel, what="append"))

    def _on_receipt(self, token: AppendCallback | Edge, result: Any, message_id: Any) -> None:
        if self._deferred is not None:  # a read-back decides what the log holds first
            self._deferred.append(functools.partial(self._on_receipt, token, result, message_id))
            return
        if type(token) is Edge:
            if token.segment.record(token.is_last, (result, message_id)):
                self._resolve(token.segment)
            return
        self._in_flight -= 1
        self._complete(token, result, message_id)  # type: ignore[arg-type]

    def _on_refused_edge(self, edge: Edge, error: StreamwalError) -> None:
        """An edge ``send_async`` refused: its outcome, taken in turn like a receipt."""
        if self._deferred is not None:
            self._deferred.append(functools.partial(self._on_refused_edge, edge, error))
            return
        if edge.segment.record(edge.is_last, error):
            self._resolve(edge.segment)

    def _resolve(self, segment: Segment) -> None:
        """Answer every entry of a segment once both its edges reported (.segments)."""
        dones, first, last = segment.dones, segment.first, segment.last
        n = len(dones)
        if not segment.broken and type(first) is tuple and type(last) is tuple:
            (first_result, first_id), (last_result, last_id) = first, last
            ok = _pulsar.Result.Ok
            if first_result == ok and last_result == ok:
                landed = positions(first_id, last_id, n)
                if landed is not None:
                    error = self._check_landed(landed[0])
                    if error is not None:
                        self._fail_all(dones, error)
                        return
                    self._in_flight -= n
                    self._last_landed = landed[-1]
                    for done, message_id in zip(dones, landed, strict=True):
                        done(message_id, None)  # type: ignore[misc]
                    return
                if self._read_back(segment, first_id, last_id):
                    return
            elif first_result == last_result:  # the batch failed as one
                self._fail_all(dones, self._failure(first_result))
                return
        _log.warning(
            "channel %s: a segment of %d appends did not land in one or two batches (first: "
            "%s, last: %s); its middle entries are answered with an unknown position",
            self._channel,
            n,
            first,
            last,
        )
        record_segment(self._channel, UNPLACED)
        unknown = UnknownPositionError(
            f"append on {self._channel!r}: its segment was cut more than once or partly "
            "refused by the client; whether it landed is unknown"
        )
        for i, done in enumerate(dones):
            if done is None:
                continue
            self._in_flight -= 1
            edge = first if i == 0 else last if i == n - 1 else None
            if i == n - 1 and isinstance(edge, tuple):
                self._last_landed = None  # the entries in between are unknown
            if isinstance(edge, tuple):
                self._complete(done, *edge)
            elif isinstance(edge, BaseException):
                done(None, edge)
            else:
                done(None, unknown)

    def _fail_all(self, dones: list[AppendCallback | None], error: StreamwalError) -> None:
        """Answer every entry of a segment (those not answered already) with ``error``."""
        for done in dones:
            if done is not None:
                self._in_flight -= 1
                done(None, error)

    def _read_back(self, segment: Segment, first_id: Any, last_id: Any) -> bool:
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
        dones = segment.dones
        error = self._check_landed(first)
        if error is not None:
            self._fail_all(dones, error)
            return True
        if dones[0] is not None:
            self._in_flight -= 1
            dones[0](first, None)
        rest = dones[1:]
        _log.info(
            "channel %s: a segment of %d appends was cut more than once (%s .. %s); "
            "reading its middle back",
            self._channel,
            len(dones),
            first,
            last,
        )
        record_segment(self._channel, READ_BACK)
        self._deferred = deque()
        task = asyncio.get_running_loop().create_task(
            self._messages_between(first, last, segment.payloads)
        )
        self._readbacks.add(task)
        task.add_done_callback(self._readbacks.discard)
        # also when cancelled before its first step (close() in the same iteration)
        task.add_done_callback(functools.partial(self._place_rest, rest, last))
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
            self._last_landed = last  # everything between the edges is ours
            answers: list[tuple[MessageId | None, BaseException | None]] = [
                (message_id, None) for message_id in [*found, last]
            ]
        else:
            _log.warning(
                "channel %s: reading a cut segment back: %s; its appends are answered "
                "with an unknown position%s",
                self._channel,
                outcome,
                "" if self._closed else ", and this owner stops writing",
            )
            record_segment(self._channel, UNPLACED)
            unknown = UnknownPositionError(
                f"append on {self._channel!r}: its segment was cut more than once and "
                f"reading it back {outcome}; whether it landed is unknown"
            )
            if self._closed:
                # the guard cannot judge what lands after the gap, but nobody wrote
                # there for all we know: unknown, not fenced
                self._unverified = unknown
            elif self._fenced is None:
                # cannot show that no other producer wrote between our entries
                self._fenced = ChannelFencedError(
                    self._channel, f"the log between our entries up to {last} is {outcome}"
                )
            answers = [(None, unknown)] * len(rest)
        for done, (message_id, error) in zip(rest, answers, strict=True):
            if done is not None:
                self._in_flight -= 1
                _answer_guarded(done, message_id, error)
        deferred, self._deferred = self._deferred, None
        while deferred:
            if self._deferred is not None:  # another read-back began: keep the order
                self._deferred.extend(deferred)
                return
            try:
                deferred.popleft()()
            except Exception:  # one bad answer must not strand the receipts behind it
                _log.exception("channel %s: handling a deferred receipt failed", self._channel)

    async def _messages_between(
        self, first: PulsarMessageId, last: PulsarMessageId, payloads: list[bytes]
    ) -> list[PulsarMessageId] | None:
        """The ids of the segment's middle messages as the log has them, reading from
        ``first`` to ``last`` (``payloads``: the whole segment's, edges included);
        ``None`` if the log holds anything else there (a missing or foreign message)."""
        timeout = self._config.operation_timeout_s
        reader = await asyncio.wait_for(
            self._client.create_reader(
                self._topic, first.to_pulsar(), start_message_id_inclusive=True
            ),
            timeout,
        )
        found: list[PulsarMessageId] = []
        try:
            for i, payload in enumerate(payloads):
                message = await asyncio.wait_for(reader.read_next(), timeout)
                landed = PulsarMessageId.from_pulsar(message.message_id())
                edge = first if i == 0 else last if i == len(payloads) - 1 else None
                if message.data() != payload:
                    return None
                if edge is not None:
                    if not _same_position(landed, edge):
                        return None
                elif _same_position(landed, last) or landed.sort_key() > last.sort_key():
                    return None  # the last edge came early: a middle message is missing
                else:
                    found.append(landed)
        finally:
            try:
                await asyncio.wait_for(reader.close(), timeout)
            except (PulsarException, TimeoutError):
                pass  # a reader the broker forgot: nothing to release here
        return found

    def _complete(self, done: AppendCallback, result: Any, message_id: Any) -> None:
        if result == _pulsar.Result.Ok:
            landed = PulsarMessageId.from_pulsar(message_id)
            error = self._check_landed(landed)
            if error is None:
                done(landed, None)
            else:
                done(None, error)
            return
        done(None, self._failure(result))

    def _check_landed(self, landed: PulsarMessageId) -> StreamwalError | None:
        """The interleaving guard (module doc); ``None`` if ``landed`` may be acknowledged."""
        if self._fenced is not None:
            return self._fenced.in_flight()  # it landed, but is not acknowledged
        if self._unverified is not None:
            return self._unverified
        if landed.ledger < 0 or landed.entry < 0:
            # seen under connection resets: a receipt with no position (-1:-1); the
            # entry it stands for may be in the log, so the guard starts over
            self._last_landed = None
            return UnknownPositionError(
                f"append on {self._channel!r}: the broker gave no position ({landed})"
            )
        last = self._last_landed
        if last is None or landed.ledger != last.ledger or landed.entry <= last.entry + 1:
            if (
                last is None
                or landed.ledger != last.ledger
                or (landed.entry, landed.batch_index) > (last.entry, last.batch_index)
            ):  # fields, not MessageId ordering: two ABC checks less per receipt
                self._last_landed = landed
            return None
        _log.error(
            "channel %s: another producer wrote between our entries %s and %s: "
            "this owner was fenced and let back in; appends stop",
            self._channel,
            last,
            landed,
        )
        self._fenced = ChannelFencedError(
            self._channel, f"another producer wrote between {last} and {landed}"
        )
        return self._fenced.in_flight()

    def _failure(self, result: Any) -> StreamwalError:
        """The error of an append the client had accepted and then failed."""
        if self._fenced is not None:
            return self._fenced.in_flight()
        if result in FENCING_RESULTS and not self._closed:
            _log.warning("channel %s: fenced by a newer owner (%s)", self._channel, result)
            self._fenced = ChannelFencedError(self._channel, f"broker says {result}")
            return self._fenced.in_flight()
        error = translate(PulsarException(result), channel=self._channel, what="append")
        return after_send(error, result)

    @property
    def is_fenced(self) -> bool:
        return self._fenced is not None

    async def read(self, policy: DeliveryPolicy) -> PulsarScanner:
        self._check_open()
        scanner = await asyncio.wait_for(
            self._open_reader(policy), timeout=self._config.operation_timeout_s + 1
        )
        if self._closed:  # closed while the reader was being created: nobody else would
            await scanner.close()
            raise ClosedError(f"channel {self._channel!r} is closed")
        scanner.on_close = self._scanners.discard
        self._scanners.add(scanner)
        return scanner

    async def _open_reader(self, policy: DeliveryPolicy) -> PulsarScanner:
        if policy.kind == DeliveryPolicy.ALL:
            return PulsarScanner(await self._reader(pulsar.MessageId.earliest), self._channel)
        if policy.kind == DeliveryPolicy.LATEST:
            return PulsarScanner(await self._reader(pulsar.MessageId.latest), self._channel)
        if policy.kind not in (DeliveryPolicy.START_FROM, DeliveryPolicy.START_AFTER):
            raise InvalidInputError(f"the Pulsar backend cannot read from {policy}")
        start = policy.message_id
        if not isinstance(start, PulsarMessageId):
            raise InvalidInputError(f"{start!r} is not a Pulsar message id")
        truncated = await self._retention.truncation_point()
        if truncated is not None and start < truncated:
            raise TruncatedError(self._channel, start, truncated)
        # Open inclusive and check that the first entry is the one asked for: a
        # Pulsar reader silently moves to the next valid position otherwise.
        reader = await self._reader(start.to_pulsar(), inclusive=True)
        try:
            if not await reader.has_message_available():
                raise InvalidInputError(f"message id {start} is not in channel {self._channel!r}")
            first = to_backend_message(await reader.read_next())
        except PulsarException as exc:
            await reader.close()
            raise translate(exc, channel=self._channel, what="read") from exc
        except BaseException:
            await reader.close()
            raise
        if first.message_id != start:
            await reader.close()
            raise InvalidInputError(f"message id {start} is not in channel {self._channel!r}")
        keep = first if policy.kind == DeliveryPolicy.START_FROM else None
        return PulsarScanner(reader, self._channel, first=keep)

    async def _reader(self, start: Any, inclusive: bool = False) -> Any:
        try:
            return await self._client.create_reader(
                self._topic, start, start_message_id_inclusive=inclusive
            )
        except PulsarException as exc:
            raise translate(exc, channel=self._channel, what="create reader") from exc

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._on_close(self)
        for scanner in list(self._scanners):
            await scanner.close()
        self._scanners.clear()
        self._end_iteration()  # accepted appends reach the client, which flushes them
        readbacks = list(self._readbacks)
        for task in readbacks:
            task.cancel()
        # their callbacks answer what the reads held back; they run before gather returns
        await asyncio.gather(*readbacks, return_exceptions=True)
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await asyncio.wait_for(producer.close(), timeout=self._config.operation_timeout_s)
            except (PulsarException, TimeoutError):
                pass  # fenced or unreachable: nothing left to flush
        if self._writer_client is not None:
            try:
                await asyncio.wait_for(
                    self._writer_client.close(), timeout=self._config.operation_timeout_s
                )
            except (PulsarException, TimeoutError):
                pass  # unreachable broker: the client is gone either way
