"""The read-back guard: place a segment that was cut more than once.

Both edges of such a segment landed, but not in a shape that places its middle
entries. The first edge is answered, the log between the edges is read back, and the
receipts that come meanwhile wait, because a foreign entry there means another
producer wrote between this owner's entries (the interleaving guard of
:mod:`.sending`).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from typing import Any

from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.metrics import READ_BACK, UNPLACED, record_segment
from streamwal.adaptors.pulsar.segments import Segment
from streamwal.adaptors.pulsar.sending import Sending
from streamwal.adaptors.pulsar.state import log
from streamwal.errors import ChannelFencedError, UnknownPositionError
from streamwal.wal.backend import AppendCallback
from streamwal.wal.message_id import MessageId

__all__ = ["ReadBack"]


def _answer_guarded(
    done: AppendCallback, message_id: MessageId | None, error: BaseException | None
) -> None:
    """Call an append's callback where nothing else would catch what it raises."""
    try:
        done(message_id, error)
    except Exception:
        log.exception("an append's callback raised")


def _same_position(landed: PulsarMessageId, receipt: PulsarMessageId) -> bool:
    """A read message is the one a receipt named (a receipt for the only message of a
    batch may carry no batch index)."""
    return (landed.ledger, landed.entry) == (receipt.ledger, receipt.entry) and (
        receipt.batch_index < 0 or landed.batch_index == receipt.batch_index
    )


class ReadBack(Sending):
    """Sending, with segments cut more than once placed by reading them back."""

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
        log.info(
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
            log.warning(
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
                log.exception("channel %s: handling a deferred receipt failed", self._channel)

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
