"""A client's identity as an idempotent producer: a producer id and, per channel, the
next sequence number.

:class:`~streamwal.node.client.NodeClient` numbers every append with one; its retries
reuse the numbers, so an append whose outcome is unknown (a lost connection, a
timeout, a change of owner) is retried without risking a second copy. Share one
identity between the clients of several nodes to retry an append on another node
(the channel's next owner rebuilds the window from the log).

The node takes numbers out of order within its window (concurrent appends), but
refuses one a whole window ahead, so a number given up on must not leave a hole:
:meth:`ProducerIdentity.give_up` takes it back when the append is known not written
and was the last one numbered; otherwise (it may be in the log, or later numbers are
out) the identity takes a fresh producer id, numbered from 0, as
Kafka's producer does after an error it cannot resolve.

The node remembers a window of numbers per producer (``wal.idempotence_window``,
1,024 by default) and refuses a number older than the window below the highest it has
seen: concurrent batches of one identity whose numbers span more than the window can
reach it in an order that makes the earliest too old (four callers of batches of 500
did, now and then). :meth:`ProducerIdentity.reserve` numbers a batch only once the
numbers in flight on its channel and the batch's span at most ``window``, waiting for
answers otherwise, as Kafka bounds a producer's requests in flight; a batch larger
than the window goes alone. Streamed appends are reserved one by one the same way, so
many streams of one identity cannot run a window ahead of one another either; and
reservations on a channel are served in the order they came, so appends numbered in
turn keep the order in which they were made.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field

from streamwal.errors import WriteOutcome

__all__ = ["DEFAULT_WINDOW", "ProducerIdentity"]

#: the node's default ``wal.idempotence_window``
DEFAULT_WINDOW = 1024


@dataclass
class ProducerIdentity:
    """``producer_id`` defaults to 63 random bits: unique without coordination."""

    producer_id: int = field(default_factory=lambda: _fresh_id())
    #: the numbers one producer id may have in flight on a channel: at most the node's
    #: ``wal.idempotence_window``
    window: int = DEFAULT_WINDOW
    _next: dict[str, int] = field(default_factory=dict, repr=False)
    #: (producer id, channel) -> first -> last number of each batch :meth:`reserve` gave
    _in_flight: dict[tuple[int, str], dict[int, int]] = field(default_factory=dict, repr=False)
    _settled: asyncio.Event | None = field(default=None, repr=False)
    #: channel -> how many reservations wait there (a new one queues behind them)
    _waiting: dict[str, int] = field(default_factory=dict, repr=False)

    async def reserve(self, pchannel: str, count: int) -> tuple[int, int]:
        """(producer id, first number) of ``count`` new appends to ``pchannel``, once
        the numbers in flight there and these span at most :attr:`window`, and after the
        reservations already waiting there (see the module); :meth:`settle` must
        follow, answered or not."""
        numbers = self.try_reserve(pchannel, count)
        if numbers is not None:
            return numbers
        self._waiting[pchannel] = self._waiting.get(pchannel, 0) + 1
        try:
            while True:  # woken in the order they waited (asyncio.Event's)
                if self._settled is None:
                    self._settled = asyncio.Event()
                await self._settled.wait()
                if self._fits(pchannel, count):
                    return self._take(pchannel, count)
        finally:
            left = self._waiting[pchannel] - 1
            if left:
                self._waiting[pchannel] = left
            else:
                del self._waiting[pchannel]

    def try_reserve(self, pchannel: str, count: int) -> tuple[int, int] | None:
        """:meth:`reserve` when it need not wait, else ``None`` (nothing reserved): a
        streamed append pays no coroutine for the common case."""
        if not self._waiting.get(pchannel) and self._fits(pchannel, count):
            return self._take(pchannel, count)
        return None

    def _fits(self, pchannel: str, count: int) -> bool:
        spans = self._in_flight.get((self.producer_id, pchannel))
        if not spans:
            return True
        # the spans were added in increasing order of their first numbers (see settle),
        # so the lowest in flight is the oldest still held: no scan per reservation
        lowest = next(iter(spans))
        return self._next.get(pchannel, 0) + count - lowest <= self.window

    def _take(self, pchannel: str, count: int) -> tuple[int, int]:
        first = self._next.get(pchannel, 0)
        self._next[pchannel] = first + count
        self._in_flight.setdefault((self.producer_id, pchannel), {})[first] = first + count - 1
        return self.producer_id, first

    def settle(self, producer_id: int, pchannel: str, first: int) -> None:
        """The batch :meth:`reserve` numbered from ``first`` is answered (or given up):
        its numbers no longer hold back the next batch's. A number given back
        (:meth:`give_up`) is the last one handed out, settled in the same step or
        already: reserved again, it is the highest in flight, and the spans stay in
        increasing order."""
        key = (producer_id, pchannel)
        spans = self._in_flight.get(key)
        if spans is not None:
            spans.pop(first, None)
            if not spans:
                del self._in_flight[key]
        event, self._settled = self._settled, None
        if event is not None:
            event.set()

    def next_sequence(self, pchannel: str) -> int:
        """The sequence number of the next new append to ``pchannel``."""
        seq = self._next.get(pchannel, 0)
        self._next[pchannel] = seq + 1
        return seq

    def give_up(
        self, producer_id: int, pchannel: str, sequence: int, outcome: WriteOutcome
    ) -> None:
        """The caller gives up on the append numbered ``(producer_id, sequence)`` (no
        more retries). A number of an id the identity has left behind (another append
        renewed it meanwhile) is not handed back: the current id may have given the same
        sequence to an append in flight or landed, and a new append numbered with it
        would be answered as that one's copy, at its position."""
        if producer_id != self.producer_id:
            return
        last = self._next.get(pchannel, 0) - 1
        if outcome is WriteOutcome.NOT_WRITTEN and sequence == last:
            self._next[pchannel] = sequence
            return
        self.renew()

    def renew(self) -> None:
        """A fresh producer id, numbered from 0: after a number was refused (a gap, or
        too old), or one whose fate is unknown was given up on."""
        self.producer_id = _fresh_id()
        self._next.clear()


def _fresh_id() -> int:
    return secrets.randbits(63)
