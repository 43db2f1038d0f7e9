"""One channel (= one Pulsar topic) opened by a node.

The channel is split by role, one module each: :mod:`.takeover` (the fence, then the
writing producer), :mod:`.sending` (appends in call order with segment receipts, and
the interleaving guard), :mod:`.readback` (placing a segment cut more than once) and
:mod:`.readers` (scanners per delivery policy); :mod:`.state` holds what they share.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.readback import ReadBack
from streamwal.adaptors.pulsar.readers import Readers
from streamwal.adaptors.pulsar.takeover import Takeover
from streamwal.wal.chunking import entry_budget

__all__ = ["ENVELOPE_RESERVE", "PulsarBackendWAL"]

#: what an entry's Pulsar envelope may take beyond payload and properties: the
#: message metadata (producer name, sequence id, publish time, chunk-free batch
#: wrapper of one message) is a few hundred bytes; kept generous, as a broker limit
#: counts the whole frame
ENVELOPE_RESERVE = 64 * 1024


class PulsarBackendWAL(Readers, ReadBack, Takeover):
    """A topic opened read-write (exclusive producer on demand) or read-only; its
    checkpoints and truncation are :mod:`.retention`'s (through the shared state)."""

    #: the largest entry the broker takes (the opener's reading of its
    #: ``maxMessageSize``); ``None``: the configured ``max_message_size``
    message_size_limit: Callable[[], int] | None = None

    @property
    def max_entry_bytes(self) -> int:
        """Payload plus properties one entry may carry: the broker's limit less
        :data:`ENVELOPE_RESERVE` (what the WAL chunks above, streamwal.wal.chunking)."""
        limit = self.message_size_limit
        return entry_budget(
            self._config.max_message_size if limit is None else limit(), ENVELOPE_RESERVE
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._on_close(self)
        for scanner in list(self._scanners):
            await scanner.close()
        self._scanners.clear()
        self._end_iteration()  # accepted appends reach the client, which flushes them
        # their callbacks answer what the reads held back; they run before gather
        # returns, and may start another read for a receipt that waited: until none is left
        while self._readbacks:
            readbacks = list(self._readbacks)
            for task in readbacks:
                task.cancel()
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
