"""Messages larger than one backend entry: split on append, rebuilt on read.

This module stays whole past 500 lines: the writer of chunk records and their reader
are one contract (both log formats' markers), read side by side.

A backend refuses an entry over its limit (Pulsar's ``maxMessageSize``, 5 MiB by
default), yet one Milvus insert can be larger. Pulsar's own client chunking is no way
out: it does not work with batching, and its chunks would interleave with the fence
and the segment receipts. So this layer (Milvus's "adaptor" place: below the
interceptors, above the backend) writes such a message as consecutive chunk records
and turns them back into one entry for every reader, before decoding. Everything
above it (time ticks, idempotence, transactions, truncation, the buffer) sees one
message with one id: that of its **first** chunk. The first chunk's id is chosen over
the last's because every positional read then works on the raw log unchanged: a read
from the id starts at the message's first record, a read after it starts inside the
message and skips the rest of it (see :class:`ChunkAssembler`), and truncating before
the id keeps all of the message.

The records' format is specified in ``docs/wire-format.md`` ("Chunked messages"): in
log format v1 the chunk markers are ``_c*`` properties; in v2 each chunk's payload is
a chunk header of the WAL's frame (:mod:`streamwal.wal.message.frame`) and its part of
the pack, and the rebuilt entry is the whole pack.
The rules for readers:

- chunks of one message are consecutive: the writer sends the next chunk only once the
  previous one is persisted, and holds every later append back until the message is
  done, so no other entry lands between them;
- a sequence that stops before its last chunk (the owner failed or was fenced between
  chunks) is dropped when the next non-chunk entry or the next first chunk comes: its
  append was never acknowledged, and the new owner's first time tick is such an entry;
- chunks that continue a message whose first chunk precedes the read's start (a read
  after that message, from a time position, or of a log truncated inside a ledger)
  are skipped until the first entry that starts something;
- anything else that does not fit (a bad marker, a missing chunk, a size or checksum
  that does not match) ends the read with :class:`~streamwal.errors.CorruptedChunkError`.
"""

from __future__ import annotations

import collections
import logging
import math
import uuid
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any, Final

from opentelemetry import metrics

from streamwal.errors import ClosedError, CorruptedChunkError, InvalidInputError, StreamwalError
from streamwal.wal.backend import (
    AccessMode,
    AppendCallback,
    BackendMessage,
    BackendScanner,
    BackendWAL,
    DeliveryPolicy,
)
from streamwal.wal.message.frame import (
    CHUNK_HEADER,
    FORMAT_PROPERTY,
    ChunkHeader,
    decode_chunk_header,
    encode_chunk_header,
    is_chunk,
)
from streamwal.wal.message_id import MessageId

__all__ = [
    "KEY_CHUNK_COUNT",
    "KEY_CHUNK_CRC",
    "KEY_CHUNK_ID",
    "KEY_CHUNK_INDEX",
    "KEY_CHUNK_SIZE",
    "KEY_CHUNK_TYPE",
    "MIN_ENTRY_BYTES",
    "ChunkAssembler",
    "ChunkingBackend",
    "ChunkingScanner",
    "entry_budget",
    "properties_size",
    "reassemble",
    "split",
    "with_chunking",
]

_log = logging.getLogger(__name__)
_dropped = metrics.get_meter(__name__).create_counter(
    "streamwal.wal.chunks.dropped",
    unit="{message}",
    description="Chunked messages that stopped before their last chunk (never acknowledged)",
)

KEY_CHUNK_ID = "_ck"
KEY_CHUNK_INDEX = "_ci"
KEY_CHUNK_COUNT = "_cn"
KEY_CHUNK_SIZE = "_cs"
KEY_CHUNK_CRC = "_cc"
KEY_CHUNK_TYPE = "_ct"
_KEY_TYPE = "_t"  # the codec's; renamed on a chunk so no chunk decodes as a message
_MARKERS = (KEY_CHUNK_ID, KEY_CHUNK_INDEX, KEY_CHUNK_COUNT, KEY_CHUNK_SIZE, KEY_CHUNK_CRC)

#: Milvus's floor for a backend's entry limit: below it a large message would become
#: thousands of records, and a broker limit that low is a misconfiguration whose
#: refusal (InvalidInputError) is clearer than a flood of chunks
MIN_ENTRY_BYTES = 256 * 1024
#: bytes counted per property beyond its key and value (protobuf tag and lengths)
_PROPERTY_OVERHEAD = 8
#: the markers of one chunk, counted generously (ids and counts at their longest)
_MARKER_BYTES = 5 * _PROPERTY_OVERHEAD + 32 + 3 * 20 + 8 + 16
_DECIMAL_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset("0123456789abcdef")


def entry_budget(limit: int, reserve: int) -> int:
    """What a backend can promise for payload plus properties of one entry: its
    ``limit`` less the ``reserve`` its own envelope takes, never below
    :data:`MIN_ENTRY_BYTES`."""
    return max(limit - reserve, MIN_ENTRY_BYTES)


def properties_size(properties: Mapping[str, str]) -> int:
    """The bytes ``properties`` add to an entry, as :func:`split` counts them.

    A plain loop: it runs for every append, and a generator under ``sum`` costs half as
    much again."""
    size = _PROPERTY_OVERHEAD * len(properties)
    for key, value in properties.items():
        size += len(key) + len(value)
    return size


def split(
    payload: bytes,
    properties: Mapping[str, str],
    max_entry_bytes: int,
    chunk_id: str | None = None,
) -> list[tuple[bytes, dict[str, str]]] | None:
    """The chunk records of one message, or ``None`` if it fits one entry.

    Properties travel whole in the first chunk, so they must leave a quarter of an
    entry for payload: :class:`~streamwal.errors.InvalidInputError` otherwise (a
    message of little but properties is a mistake that chunks would only spread).
    """
    head_size = properties_size(properties)
    size = len(payload)
    if size + head_size <= max_entry_bytes:
        return None
    if FORMAT_PROPERTY in properties:
        return _split_v2(payload, properties, max_entry_bytes, chunk_id)
    room = max_entry_bytes - head_size - _MARKER_BYTES
    if room < max_entry_bytes // 4:
        raise InvalidInputError(
            f"the message's properties take {head_size} bytes of the backend's "
            f"{max_entry_bytes}-byte entry limit: no room left for its payload"
        )
    count = max(2, math.ceil(size / room))
    step = math.ceil(size / count)  # even chunks: the last is not a sliver
    cid = chunk_id if chunk_id is not None else uuid.uuid4().hex
    common = {
        KEY_CHUNK_ID: cid,
        KEY_CHUNK_COUNT: str(count),
        KEY_CHUNK_SIZE: str(size),
        KEY_CHUNK_CRC: f"{zlib.crc32(payload):08x}",
    }
    view = memoryview(payload)
    chunks: list[tuple[bytes, dict[str, str]]] = []
    for index in range(count):
        props = dict(common)
        props[KEY_CHUNK_INDEX] = str(index)
        if index == 0:
            for key, value in properties.items():
                props[KEY_CHUNK_TYPE if key == _KEY_TYPE else key] = value
        chunks.append((bytes(view[index * step : (index + 1) * step]), props))
    return chunks


def _split_v2(
    payload: bytes, properties: Mapping[str, str], max_entry_bytes: int, chunk_id: str | None
) -> list[tuple[bytes, dict[str, str]]]:
    """Log format v2's chunks: the entry's properties on each (they are the format's,
    a few bytes), the chunk header at the front of each payload."""
    size = len(payload)
    room = max_entry_bytes - properties_size(properties) - CHUNK_HEADER.size
    count = max(2, math.ceil(size / room))
    step = math.ceil(size / count)
    cid = bytes.fromhex(chunk_id) if chunk_id is not None else uuid.uuid4().bytes
    crc = zlib.crc32(payload)
    view = memoryview(payload)
    return [
        (
            encode_chunk_header(ChunkHeader(cid, index, count, size, crc))
            + view[index * step : (index + 1) * step],
            dict(properties),
        )
        for index in range(count)
    ]


def _is_chunk(raw: BackendMessage) -> bool:
    props = raw.properties
    if FORMAT_PROPERTY in props:
        return is_chunk(raw.payload)
    return KEY_CHUNK_ID in props


class _Sequence:
    """A chunked message being read: its first record's id and properties, the parts."""

    __slots__ = ("chunk_id", "count", "crc", "discard", "head", "next_index", "parts", "size")

    def __init__(
        self, head: BackendMessage, markers: tuple[str, int, int, int, str], part: bytes
    ) -> None:
        self.chunk_id, _, self.count, self.size, self.crc = markers
        self.head = head
        self.parts: list[bytes] = [part]
        self.next_index = 1
        self.discard = False


class ChunkAssembler:
    """Turns a channel's raw entries, in log order, into whole entries (module rules).

    :meth:`feed` takes each entry and returns what a reader gets for it: the entry
    itself, a rebuilt message (on its last chunk), or ``None`` (a chunk that does not
    end a message, an unfinished sequence dropped, a leading orphan skipped).
    """

    def __init__(self, channel: str) -> None:
        self._channel = channel
        self._open: _Sequence | None = None
        self._started = False  # an entry other than a leading orphan chunk was seen
        self.dropped = 0
        self.orphans = 0

    @property
    def idle(self) -> bool:
        """No sequence open: a non-chunk entry passes as it is."""
        return self._open is None

    def feed(self, raw: BackendMessage) -> BackendMessage | None:
        if not _is_chunk(raw):
            if self._open is not None:
                self._drop(raw)
            self._started = True
            return raw
        if FORMAT_PROPERTY in raw.properties:
            markers, part = self._v2_markers(raw)
        else:
            markers, part = self._markers(raw), raw.payload
        chunk_id, index, count, size, crc = markers
        if index == 0:
            if self._open is not None:
                self._drop(raw)
            self._started = True
            self._open = _Sequence(raw, markers, part)
            return None
        open_ = self._open
        if open_ is None:
            if not self._started:  # the rest of a message that began before this read
                self.orphans += 1
                return None
            raise self._corrupted(raw, f"chunk {index} of {count} has no first chunk")
        if chunk_id != open_.chunk_id:
            raise self._corrupted(
                raw,
                f"chunk {index} of message {chunk_id} inside message {open_.chunk_id} "
                f"(at {open_.head.message_id}), which has {open_.next_index} of "
                f"{open_.count} chunks",
            )
        if index != open_.next_index:
            raise self._corrupted(
                raw, f"chunk {index} of {chunk_id} follows chunk {open_.next_index - 1}"
            )
        if (count, size, crc) != (open_.count, open_.size, open_.crc):
            raise self._corrupted(raw, f"chunk {index} of {chunk_id} disagrees with its first")
        open_.parts.append(part)
        open_.next_index += 1
        if index < count - 1:
            return None
        self._open = None
        payload = b"".join(open_.parts)
        open_.parts.clear()
        if len(payload) != size:
            raise self._corrupted(raw, f"{chunk_id}: {len(payload)} bytes, its chunks say {size}")
        if f"{zlib.crc32(payload):08x}" != crc:
            raise self._corrupted(raw, f"{chunk_id}: the payload does not match its checksum")
        head_props = open_.head.properties
        logical = dict(head_props) if FORMAT_PROPERTY in head_props else _logical(head_props)
        return BackendMessage(open_.head.message_id, payload, logical)

    def _v2_markers(self, raw: BackendMessage) -> tuple[tuple[str, int, int, int, str], bytes]:
        try:
            header, part = decode_chunk_header(raw)
        except StreamwalError as exc:  # a newer frame version is corruption here too
            raise self._corrupted(raw, f"malformed chunk header ({exc})") from None
        count, index = header.count, header.index
        if count < 2 or not 0 <= index < count:
            raise self._corrupted(raw, f"chunk {index} of {count}")
        markers = (header.chunk_id.hex(), index, count, header.size, f"{header.crc:08x}")
        return markers, part

    def _markers(self, raw: BackendMessage) -> tuple[str, int, int, int, str]:
        props = raw.properties
        try:
            chunk_id = props[KEY_CHUNK_ID]
            index, count, size = (
                _decimal(props[KEY_CHUNK_INDEX]),
                _decimal(props[KEY_CHUNK_COUNT]),
                _decimal(props[KEY_CHUNK_SIZE]),
            )
            crc = props[KEY_CHUNK_CRC]
        except (KeyError, ValueError, TypeError) as exc:
            raise self._corrupted(raw, f"malformed chunk markers ({exc!r})") from None
        if not isinstance(chunk_id, str) or not chunk_id or len(chunk_id) > 64:
            raise self._corrupted(raw, f"malformed chunk id {chunk_id!r}")
        if not isinstance(crc, str) or len(crc) != 8 or not set(crc) <= _HEX_DIGITS:
            raise self._corrupted(raw, f"malformed chunk checksum {crc!r}")
        if count < 2 or not 0 <= index < count:
            raise self._corrupted(raw, f"chunk {index} of {count}")
        if index == 0 and KEY_CHUNK_TYPE not in props:
            raise self._corrupted(raw, f"the first chunk of {chunk_id} has no {KEY_CHUNK_TYPE}")
        return chunk_id, index, count, size, crc

    def _drop(self, next_entry: BackendMessage) -> None:
        open_ = self._open
        assert open_ is not None
        self._open = None
        self.dropped += 1
        _dropped.add(1, {"channel": self._channel})
        _log.warning(
            "channel %s: dropped the unfinished chunked message at %s (%d of %d chunks): "
            "%s came first",
            self._channel,
            open_.head.message_id,
            open_.next_index,
            open_.count,
            next_entry.message_id,
        )

    def _corrupted(self, raw: BackendMessage, problem: str) -> CorruptedChunkError:
        return CorruptedChunkError(self._channel, raw.message_id, problem)


def _decimal(text: object) -> int:
    if not isinstance(text, str) or not text or len(text) > 20 or not set(text) <= _DECIMAL_DIGITS:
        raise ValueError(f"not a decimal: {text!r}")
    return int(text)


def _logical(head: Mapping[str, str]) -> dict[str, str]:
    props = {k: v for k, v in head.items() if k not in _MARKERS}
    props[_KEY_TYPE] = props.pop(KEY_CHUNK_TYPE)
    return props


def reassemble(channel: str, entries: Iterable[BackendMessage]) -> Iterator[BackendMessage]:
    """``entries`` (a whole log, in order) with chunked messages rebuilt; a sequence
    still open at the end is left out (its append cannot have been acknowledged)."""
    assembler = ChunkAssembler(channel)
    for raw in entries:
        msg = assembler.feed(raw)
        if msg is not None:
            yield msg


class ChunkingScanner:
    """A backend scanner whose chunked messages come out whole."""

    def __init__(self, inner: BackendScanner, channel: str) -> None:
        self._inner = inner
        self._assembler = ChunkAssembler(channel)

    def __aiter__(self) -> AsyncIterator[BackendMessage]:
        return self

    async def __anext__(self) -> BackendMessage:
        inner, assembler = self._inner, self._assembler
        while True:
            raw = await inner.__anext__()
            if assembler.idle and not _is_chunk(raw):
                assembler._started = True
                return raw  # almost every entry: no call into the assembler
            msg = assembler.feed(raw)
            if msg is not None:
                return msg

    async def close(self) -> None:
        await self._inner.close()

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)


class _Pending:
    """A chunked append on its way: chunks are sent one after the other."""

    __slots__ = ("chunks", "done", "first_id", "sent")

    def __init__(self, chunks: list[tuple[bytes, dict[str, str]]], done: AppendCallback) -> None:
        self.chunks = chunks
        self.done = done
        self.first_id: MessageId | None = None
        self.sent = 0


class ChunkingBackend:
    """A :class:`~streamwal.wal.backend.BackendWAL` that chunks what its backend's
    ``max_entry_bytes`` cannot take in one entry and rebuilds chunks on every read.

    A backend without ``max_entry_bytes`` (or with ``None``) is written to as it is. A
    backend whose limit can change but never falls below a floor says so with
    ``min_entry_bytes``: a message within the floor then goes through without asking
    for the live limit, which costs a few calls per append on the hot path.
    Everything else the backend offers (retention, quota explanations, ...) is reached
    through this object unchanged.

    Why chunks go one at a time: if chunk ``k`` fails while ``k + 1`` is already sent, a
    backend that does not stop at a failure (the memory backend's injected faults, a
    receipt without a position) could persist ``k + 1`` after a gap, which no reader
    could tell from corruption. So the next chunk leaves only once the previous one is
    persisted, appends made meanwhile wait here in call order, and a message's chunks
    stay consecutive. The cost is a round trip per chunk of a large message only.
    """

    def __init__(self, inner: BackendWAL) -> None:
        self.inner: Final = inner
        self._pending: _Pending | None = None
        self._waiting: collections.deque[tuple[bytes, Mapping[str, str], AppendCallback]] = (
            collections.deque()
        )
        self._draining = False
        self._closed = False
        floor = getattr(inner, "min_entry_bytes", None)
        #: what always fits one entry of the backend, whatever its limit is at the time
        self._fits_always = floor if isinstance(floor, int) else 0

    @property
    def channel(self) -> str:
        return self.inner.channel

    @property
    def access_mode(self) -> AccessMode:
        return self.inner.access_mode

    @property
    def max_entry_bytes(self) -> int | None:
        limit = getattr(self.inner, "max_entry_bytes", None)
        return limit if isinstance(limit, int) else None

    async def ensure_writable(self) -> None:
        await self.inner.ensure_writable()

    def submit(self, payload: bytes, properties: Mapping[str, str], done: AppendCallback) -> None:
        if self._pending is not None or self._waiting:
            self._waiting.append((payload, properties, done))
            return
        self._submit_now(payload, properties, done)

    def _submit_now(
        self, payload: bytes, properties: Mapping[str, str], done: AppendCallback
    ) -> None:
        size = len(payload) + properties_size(properties)
        if size <= self._fits_always:
            self.inner.submit(payload, properties, done)
            return
        limit = self.max_entry_bytes
        if limit is None or size <= limit:
            self.inner.submit(payload, properties, done)
            return
        try:
            chunks = split(payload, properties, limit)
        except InvalidInputError as exc:
            done(None, exc)
            return
        assert chunks is not None
        self._pending = _Pending(chunks, done)
        self._send_next()

    def _send_next(self) -> None:
        pending = self._pending
        assert pending is not None
        payload, props = pending.chunks[pending.sent]
        pending.chunks[pending.sent] = (b"", props)  # the backend has it: free it here
        pending.sent += 1
        self.inner.submit(payload, props, self._on_chunk)

    def _on_chunk(self, message_id: MessageId | None, error: BaseException | None) -> None:
        pending = self._pending
        assert pending is not None
        if error is None and message_id is not None:
            if pending.first_id is None:
                pending.first_id = message_id
            if pending.sent < len(pending.chunks):
                self._send_next()
                return
        self._pending = None
        pending.chunks.clear()
        if error is None and message_id is None:
            error = RuntimeError("a chunk's append finished without an id or an error")
        if error is not None:
            pending.done(None, error)
        else:
            pending.done(pending.first_id, None)
        self._drain()

    def _drain(self) -> None:
        """Hand over what waited behind a chunked message, in call order (one loop,
        even when a chunked message among them is answered at once)."""
        if self._draining:
            return
        self._draining = True
        try:
            while self._waiting and self._pending is None:
                payload, properties, done = self._waiting.popleft()
                if self._closed:
                    done(None, ClosedError(f"channel {self.channel!r} is closed"))
                else:
                    self._submit_now(payload, properties, done)
        finally:
            self._draining = False

    async def read(self, policy: DeliveryPolicy) -> BackendScanner:
        return ChunkingScanner(await self.inner.read(policy), self.inner.channel)

    async def close(self) -> None:
        self._closed = True
        try:
            await self.inner.close()
        finally:
            self._drain()

    def __getattr__(self, name: str) -> Any:
        # the backend's optional abilities (BackendRetention, QuotaExplainer, ...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def with_chunking(backend: BackendWAL) -> BackendWAL:
    """``backend`` behind a :class:`ChunkingBackend` (once)."""
    if isinstance(backend, ChunkingBackend):
        return backend
    wrapped: BackendWAL = ChunkingBackend(backend)
    return wrapped
