"""One channel (= one Pulsar topic) opened by a node.

The channel is split by role, one module each: :mod:`.takeover` (the fence, then the
writing producer), :mod:`.sending` (appends in call order with segment receipts, and
the interleaving guard), :mod:`.readback` (placing a segment cut more than once) and
:mod:`.readers` (scanners per delivery policy); :mod:`.state` holds what they share.
"""

from __future__ import annotations

import asyncio

from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.readback import ReadBack
from streamwal.adaptors.pulsar.readers import Readers
from streamwal.adaptors.pulsar.takeover import Takeover

__all__ = ["PulsarBackendWAL"]


class PulsarBackendWAL(Readers, ReadBack, Takeover):
    """A topic opened read-write (exclusive producer on demand) or read-only; its
    checkpoints and truncation are :mod:`.retention`'s (through the shared state)."""

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
