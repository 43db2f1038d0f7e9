"""A burst of appends handed to the client as one batch, with two receipts for it.

Why: the client's binding calls a Python callback for every message, on its I/O
thread, and each call takes the GIL from the event loop's thread in the middle of its
work (two context switches, and the loop's own sends slowed down meanwhile). Measured
on 128 B appends by 32 appenders, a receipt per message cost the loop and the client
together 75-110 us of CPU per append; two receipts per batch, about 30 us.

How every message still gets its own id: the WAL's producer batches, and the channel
flushes the batch right after the last message of each chunk, so a chunk is one
batch, i.e. one broker entry, and its i-th message has the id (ledger, entry, i). Only
the chunk's first and last messages carry a callback, and what they report proves
that: the same entry, the first at batch index 0 and the last at n - 1. Anything else
(a batch the client cut, a message refused on its way in) is not guessed at: the
chunk's middle entries get :class:`~wal.errors.UnknownPositionError`, neither
acknowledged nor retried, and the two edges get their own outcome.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from wal.backend import AppendCallback

__all__ = ["CHUNK_BYTES", "CHUNK_MESSAGES", "Burst", "Edge", "Prepared", "chunks", "size_of"]

#: Bounds of one chunk, well inside the producer's own batch limits (set to four times
#: these), so the client never cuts a chunk for size. 128 messages are handed over in
#: 1-2 ms; the client's batch timer, the other way a batch is cut, is 100 ms.
CHUNK_MESSAGES = 128
CHUNK_BYTES = 128 * 1024

#: (callback, built client message, size in bytes)
Prepared = tuple[AppendCallback, Any, int]


def size_of(payload: bytes, properties: Mapping[str, str]) -> int:
    """What a message adds to a batch, counted high (payload, keys, values, framing)."""
    size = len(payload) + 16
    for key, value in properties.items():
        size += len(key) + len(value) + 4
    return size


def chunks(
    prepared: Sequence[Prepared],
    max_messages: int = CHUNK_MESSAGES,
    max_bytes: int = CHUNK_BYTES,
) -> Iterator[Sequence[Prepared]]:
    """Cut a burst, in order, into runs within both bounds; a message larger than
    ``max_bytes`` on its own travels alone."""
    start, size = 0, 0
    for i, (_, _, item) in enumerate(prepared):
        if i > start and (i - start >= max_messages or size + item > max_bytes):
            yield prepared[start:i]
            start, size = i, 0
        size += item
    if start < len(prepared):
        yield prepared[start:]


class Burst:
    """One chunk in flight: its entries' callbacks and what its two edges reported.

    An edge's outcome is ``(result, message_id)`` from a receipt, or the exception
    its ``send_async`` raised. ``broken`` marks a chunk a message of which was refused
    while being handed over: its batch indexes no longer match the entries.
    """

    __slots__ = ("broken", "dones", "first", "last")

    def __init__(self, dones: list[AppendCallback | None]) -> None:
        self.dones = dones
        self.first: tuple[Any, Any] | BaseException | None = None
        self.last: tuple[Any, Any] | BaseException | None = None
        self.broken = False

    def record(self, is_last: bool, outcome: tuple[Any, Any] | BaseException) -> bool:
        """Store one edge's outcome; true once both are in."""
        if is_last:
            self.last = outcome
        else:
            self.first = outcome
        return self.first is not None and self.last is not None


class Edge:
    """The token a chunk's first or last message carries to its receipt."""

    __slots__ = ("burst", "is_last")

    def __init__(self, burst: Burst, is_last: bool) -> None:
        self.burst = burst
        self.is_last = is_last
