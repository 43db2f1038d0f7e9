"""What the WAL remembers of each idempotent producer: a bounded window of sequences.

Kafka's idempotent producer is the model: a producer id, and per producer the
sequence numbers of its last appends with where each landed. Unlike Kafka, a
producer id unknown here may start at any sequence number (an id that expired, or a
producer whose earlier appends were truncated away, is not refused), so a retry older
than what the WAL remembers (window, expiry) is refused as too old rather than guessed.
Unlike Kafka too, sequence numbers may arrive out of order within the window (a
client's concurrent appends are separate calls, handled by separate tasks): a number
up to ``window`` ahead of the next one expected is taken, and the numbers it skipped
stay open below it (known not written, so still accepted); only a number a whole
window ahead is refused as a gap.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from streamwal.errors import SequenceGapError, SequenceTooOldError
from streamwal.wal.interceptors.base import AppendResult
from streamwal.wal.message_id import MessageId

__all__ = ["Decision", "ProducerTable", "ProducerWindow"]


@dataclass
class ProducerWindow:
    """One producer: the next sequence expected, and what happened to the recent ones.

    ``acked``: sequence -> where it landed. ``in_flight``: sequence -> the result of the
    append under way (made when a concurrent retry waits for it, not before).
    ``unknown``: sequence -> the last id this owner had persisted when it was sent, for
    appends whose outcome is unknown: a retry looks the log up from there. Any other
    sequence inside the window and below ``next_seq`` is known not written and may be
    sent again.
    """

    next_seq: int
    acked: dict[int, AppendResult] = field(default_factory=dict)
    in_flight: dict[int, asyncio.Future[AppendResult | None] | None] = field(default_factory=dict)
    unknown: dict[int, MessageId] = field(default_factory=dict)

    def trim(self, window: int) -> None:
        """Forget sequences more than ``window`` below the next expected one, once twice
        that many are kept: amortized O(1) per append (a sweep every ``window`` appends;
        :meth:`ProducerTable.decide` refuses what is older anyway)."""
        oldest = self.next_seq - window
        for kept in (self.acked, self.unknown):
            if len(kept) > 2 * window:
                for seq in [s for s in kept if s < oldest]:
                    del kept[seq]


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one idempotent append: answer ``result`` (a duplicate), wait for
    ``pending`` (the same append in flight; ``None`` from it: decide again), or send it
    (``look_after`` set: look it up in the log after that id first, its earlier attempt
    has an unknown outcome)."""

    result: AppendResult | None = None
    pending: asyncio.Future[AppendResult | None] | None = None
    look_after: MessageId | None = None


_SEND = Decision()


class ProducerTable:
    """Every producer's window, least recently used first; bounded in both directions."""

    def __init__(self, window: int, max_producers: int) -> None:
        self._window = window
        self._max_producers = max_producers
        self._producers: OrderedDict[int, ProducerWindow] = OrderedDict()

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerWindow | None:
        return self._producers.get(producer_id)

    def _touch(self, producer_id: int, first_seq: int) -> ProducerWindow:
        producer = self._producers.get(producer_id)
        if producer is None:
            producer = self._producers[producer_id] = ProducerWindow(first_seq)
            while len(self._producers) > self._max_producers:
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(producer_id)
        return producer

    def decide(self, producer_id: int, seq: int) -> Decision:
        """Classify ``seq``; raises the typed error for a gap or a too old one. A
        ``_SEND`` decision reserves ``seq``: :meth:`begin` must follow at once."""
        producer = self._touch(producer_id, seq)
        acked = producer.acked.get(seq)
        if acked is not None:
            return Decision(result=acked)
        if seq in producer.in_flight:
            pending = producer.in_flight[seq]
            if pending is None:
                pending = producer.in_flight[seq] = asyncio.get_running_loop().create_future()
            return Decision(pending=pending)
        if seq >= producer.next_seq + self._window:
            # within the window ahead is not a gap: concurrent appends of one client
            # may reach the WAL out of order (separate gRPC calls, separate tasks)
            raise SequenceGapError(producer_id, seq, producer.next_seq)
        if seq < producer.next_seq - self._window:
            raise SequenceTooOldError(producer_id, seq, producer.next_seq)
        after = producer.unknown.pop(seq, None)
        return _SEND if after is None else Decision(look_after=after)

    def begin(self, producer_id: int, seq: int) -> None:
        """``seq`` is being sent, right after :meth:`decide` said so: concurrent retries
        wait for its result (``None``: it failed, decide again)."""
        producer = self._producers[producer_id]
        producer.in_flight[seq] = None
        if seq >= producer.next_seq:
            producer.next_seq = seq + 1

    def begin_range(self, producer_id: int, first: int, count: int) -> bool:
        """:meth:`decide` and :meth:`begin` for ``first .. first + count - 1`` at once,
        when the decision is the same for all: each is new (at or past the next sequence
        expected: every sequence this table knows of is below it) and none is a
        window ahead. ``False``: nothing reserved, decide each on its own."""
        producer = self._touch(producer_id, first)
        if first < producer.next_seq or first + count > producer.next_seq + self._window:
            return False
        producer.in_flight.update(dict.fromkeys(range(first, first + count)))
        producer.next_seq = first + count
        return True

    def finish_range(self, producer_id: int, first: int, results: list[AppendResult]) -> None:
        """:meth:`finish` for a range :meth:`begin_range` reserved, every one landed."""
        producer = self._producers.get(producer_id)
        if producer is None:  # expired meanwhile: remember it again
            producer = self._touch(producer_id, first + len(results))
        in_flight, acked = producer.in_flight, producer.acked
        for seq, result in enumerate(results, first):
            future = in_flight.pop(seq, None)
            acked[seq] = result
            if future is not None and not future.done():
                future.set_result(result)
        producer.trim(self._window)

    def finish(
        self,
        producer_id: int,
        seq: int,
        result: AppendResult | None,
        unknown_after: MessageId | None = None,
    ) -> None:
        """``seq`` landed at ``result``, failed unwritten (``None``), or has an unknown
        outcome (``unknown_after``: the last id persisted before it was sent)."""
        producer = self._producers.get(producer_id)
        if producer is None:  # expired meanwhile: remember it again
            producer = self._touch(producer_id, seq + 1)
        future = producer.in_flight.pop(seq, None)
        if result is not None:
            producer.acked[seq] = result
        elif unknown_after is not None:
            producer.unknown[seq] = unknown_after
        if future is not None and not future.done():
            future.set_result(result)
        producer.trim(self._window)

    def record(self, producer_id: int, seq: int, result: AppendResult) -> None:
        """A persisted append read back from the log (rebuild)."""
        producer = self._touch(producer_id, seq + 1)
        producer.acked[seq] = result
        producer.next_seq = max(producer.next_seq, seq + 1)
        producer.trim(self._window)
