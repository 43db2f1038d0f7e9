"""Settling appends a fence caught in flight, by reading the log.

An append the backend had sent when the fence came may have landed before it. The
log can tell: nothing of a fenced owner lands after the new owner's first time tick
(the fence removes the old producer before the new one writes), and an entry is
identified by its source node and time tick, both unique within an ownership. So one
read per fence, from the last entry this owner had confirmed to the first time tick of
the next ownership, settles every such append: found (it is acknowledged with its
real id) or absent (not written). When the next ownership's first time tick does not
show up within the read's bound, the appends not found stay unknown.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from streamwal.errors import DecodeError, StreamwalError, WriteOutcome
from streamwal.timeouts import within
from streamwal.wal.backend import BackendWAL, DeliveryPolicy
from streamwal.wal.message.codec import peek
from streamwal.wal.message_id import MessageId

__all__ = ["FenceReadback"]

_log = logging.getLogger(__name__)

_IDLE_S = 1.0  # no entry for this long: the read has reached the end of the log
_BOUND_S = 10.0  # the whole read, however long the log after the fence


@dataclass
class _Findings:
    after: MessageId
    ours: dict[int, MessageId] = field(default_factory=dict)
    taken_over: bool = False


class FenceReadback:
    """One read of the log after a fence, shared by the appends it caught in flight."""

    def __init__(self, channel: str, backend: BackendWAL, node_id: int) -> None:
        self._channel = channel
        self._backend = backend
        self._source = node_id
        self._read: asyncio.Task[_Findings | None] | None = None

    async def settle(self, time_tick: int, after: MessageId) -> MessageId | WriteOutcome:
        """The id of the append stamped ``time_tick`` (sent when ``after`` was the last
        confirmed entry), or what is known of it if it is not in the log."""
        if self._read is None:
            self._read = asyncio.get_running_loop().create_task(self._find(after))
        findings = await asyncio.shield(self._read)
        if findings is None or after < findings.after:
            return WriteOutcome.UNKNOWN  # the read failed, or began after this append
        found = findings.ours.get(time_tick)
        if found is not None:
            return found
        return WriteOutcome.NOT_WRITTEN if findings.taken_over else WriteOutcome.UNKNOWN

    async def _find(self, after: MessageId) -> _Findings | None:
        findings = _Findings(after)
        try:
            async with asyncio.timeout(_BOUND_S):
                scanner = await self._backend.read(DeliveryPolicy.start_after(after))
                try:
                    while True:
                        try:
                            raw = await within(anext(scanner), _IDLE_S)
                        except TimeoutError:
                            break
                        try:
                            source, first, ticks = peek(raw)
                        except DecodeError:
                            continue  # not streamwal's: nobody's append
                        if first:  # an owner's first time tick: the log was taken over
                            findings.taken_over = True
                            break
                        if source == self._source:
                            # a pack's messages: the entry's id, or (entry, i) in a pack of N > 1
                            entry = raw.message_id
                            if len(ticks) == 1:
                                findings.ours[ticks[0]] = entry
                            else:
                                for index, tick in enumerate(ticks):
                                    findings.ours[tick] = entry.in_pack(index)
                finally:
                    await scanner.close()
        except (StreamwalError, TimeoutError) as exc:
            _log.warning(
                "channel %s: reading the log after the fence failed (%r); appends in "
                "flight at the fence keep an unknown outcome",
                self._channel,
                exc,
            )
            return None
        _log.info(
            "channel %s: after the fence, %d appends in flight were found in the log%s",
            self._channel,
            len(findings.ours),
            "" if findings.taken_over else " (the new owner's first time tick was not seen)",
        )
        return findings

    async def close(self) -> None:
        """Until a read in progress ends (bounded): appends wait for its answer."""
        if self._read is not None:
            await asyncio.gather(self._read, return_exceptions=True)
