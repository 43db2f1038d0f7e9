"""Log format v2: an entry is a frame of the WAL's own, the caller's map left verbatim.

``docs/wire-format.md`` is the specification (the field tables); this module is its
implementation. An entry of format v2 has one backend property, ``swf`` = ``2``, and a
payload that is either a **pack** (a header and N >= 1 messages) or one **chunk** of a
pack too large for one entry (:mod:`streamwal.wal.chunking`).

Why a ``struct`` layout rather than protobuf: a reader decodes every message of a
catch-up read and of ``streamwal verify``, and here one ``unpack_from`` reads a
message's fixed fields (ids, time tick, lengths) and slices take the rest, with no
object per field; a Go or Java reader needs nothing but little-endian integers. The
optional fields are always present (zero when a flag says absent), so the fixed part is
one format string.

:func:`decode_pack` raises :class:`~streamwal.errors.DecodeError` for a frame that is
not valid, :class:`~streamwal.errors.UnsupportedLogFormatError` for a newer one (a
version or a WAL record this reader does not know), and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from streamwal.errors import DecodeError, InvalidInputError, UnsupportedLogFormatError
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message.codec_v1 import V1_CALLER_TYPES, MessageIdDecoder
from streamwal.wal.message.message import (
    MAX_TIME_TICK,
    NO_PROPERTIES,
    ImmutableMessage,
    MutableMessage,
    built_immutable,
)
from streamwal.wal.message.message_type import MessageType
from streamwal.wal.message_id import MessageId

__all__ = [
    "CHUNK_HEADER",
    "FLAG_HAS_PRODUCER",
    "FLAG_HAS_TXN",
    "FLAG_WAL_RECORD",
    "FORMAT_PROPERTY",
    "KIND_CHUNK",
    "KIND_PACK",
    "MAGIC",
    "MESSAGE_HEADER",
    "PACK_HEADER",
    "V2",
    "V2_PROPERTIES",
    "ChunkHeader",
    "decode_chunk_header",
    "decode_pack",
    "encode_chunk_header",
    "encode_pack",
    "is_chunk",
    "peek_pack",
]

FORMAT_PROPERTY: Final = "swf"
"""The one backend property of a v2 entry: its format version, in decimal."""
V2: Final = 2
V2_PROPERTIES: Final[Mapping[str, str]] = {FORMAT_PROPERTY: str(V2)}
MAGIC: Final = b"SWF"
KIND_PACK: Final = 1
KIND_CHUNK: Final = 2

#: magic, version, kind, pack flags, last-confirmed length, message count, source, term
PACK_HEADER: Final = struct.Struct("<3sBBBHIQQ")
_PACK_HAS_LAST_CONFIRMED = 0x01
#: flags, txn role, reserved, version, time tick, producer id, sequence, txn id,
#: type length, vchannel length, property count, payload length
MESSAGE_HEADER: Final = struct.Struct("<BBHQQQQQHHII")
_PROPERTY = struct.Struct("<II")
#: magic, version, kind, flags, chunk id, index, count, whole size, CRC-32
CHUNK_HEADER: Final = struct.Struct("<3sBBB16sIIQI")

FLAG_WAL_RECORD: Final = 0x01
FLAG_HAS_PRODUCER: Final = 0x02
FLAG_HAS_TXN: Final = 0x04
_KNOWN_FLAGS = FLAG_WAL_RECORD | FLAG_HAS_PRODUCER | FLAG_HAS_TXN

ROLE_NONE, ROLE_BEGIN, ROLE_MEMBER, ROLE_COMMIT, ROLE_ROLLBACK = range(5)
_MARKER_ROLES = {
    MessageType.BEGIN_TXN: ROLE_BEGIN,
    MessageType.COMMIT_TXN: ROLE_COMMIT,
    MessageType.ROLLBACK_TXN: ROLE_ROLLBACK,
}
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF

# A caller's type, decoded once per distinct name: a log repeats a few names, and the
# common ones come back as the very constants callers compare with
# (``msg.type is MessageType.INSERT`` holds). Bounded: a caller may use many names.
_TYPE_NAMES: dict[bytes, str] = {name.encode(): name for name in V1_CALLER_TYPES}
_TYPE_NAMES_MAX = 4096


def _role(msg: MutableMessage) -> int:
    kind = msg.type
    if type(kind) is MessageType:
        return _MARKER_ROLES.get(kind, ROLE_NONE)
    return ROLE_MEMBER if msg.txn_id is not None else ROLE_NONE


def encode_pack(
    msgs: Iterable[tuple[MutableMessage, int]],
    last_confirmed: MessageId | None,
    source: int,
    term: int,
) -> bytes:
    """The payload of a v2 entry holding ``msgs`` (each with its time tick), in order.

    ``last_confirmed`` ``None``: the pack's first message confirms itself (an owner's
    first time tick only). :class:`~streamwal.errors.InvalidInputError` for a field the
    frame cannot hold (a type or vchannel over 65,535 bytes, a payload over 4 GiB).
    """
    parts: list[bytes] = []
    count = 0
    pack_message = MESSAGE_HEADER.pack
    pack_property = _PROPERTY.pack
    for msg, time_tick in msgs:
        count += 1
        kind = msg.type
        if isinstance(kind, MessageType):
            flags = FLAG_WAL_RECORD
            type_bytes = kind.wire_name.encode()
        else:
            flags = 0
            type_bytes = kind.encode()
        producer_id = msg.producer_id
        if producer_id is not None:
            flags |= FLAG_HAS_PRODUCER
        txn_id = msg.txn_id
        if txn_id is not None:
            flags |= FLAG_HAS_TXN
        vchannel = msg.vchannel.encode() if msg.vchannel else b""
        payload = msg.payload
        properties = msg.properties
        if len(type_bytes) > _U16 or len(vchannel) > _U16 or len(payload) > _U32:
            raise InvalidInputError(
                "a message's type and vchannel take at most 65,535 bytes each, its "
                "payload at most 4 GiB"
            )
        parts.append(
            pack_message(
                flags,
                _role(msg),
                0,
                msg.version,
                time_tick,
                producer_id or 0,
                msg.sequence or 0,
                txn_id or 0,
                len(type_bytes),
                len(vchannel),
                len(properties),
                len(payload),
            )
        )
        parts.append(type_bytes)
        if vchannel:
            parts.append(vchannel)
        for key, value in properties.items():
            k, v = key.encode(), value.encode()
            parts.append(pack_property(len(k), len(v)))
            parts.append(k)
            parts.append(v)
        parts.append(payload)
    if count == 0:
        raise InvalidInputError("a pack holds at least one message")
    confirmed = last_confirmed.to_bytes() if last_confirmed is not None else b""
    header = PACK_HEADER.pack(
        MAGIC,
        V2,
        KIND_PACK,
        _PACK_HAS_LAST_CONFIRMED if last_confirmed is not None else 0,
        len(confirmed),
        count,
        source,
        term,
    )
    return b"".join((header, confirmed, *parts))


def _check_frame(raw: BackendMessage, data: bytes, kind: int) -> None:
    if len(data) < 5 or data[:3] != MAGIC:
        raise DecodeError(f"message {raw.message_id}: not a log format v2 frame")
    if data[3] != V2:
        raise UnsupportedLogFormatError(raw.message_id, f"frame version {data[3]}")
    if data[4] != kind:
        raise DecodeError(f"message {raw.message_id}: frame kind {data[4]}, expected {kind}")


def is_chunk(payload: bytes) -> bool:
    """Whether a v2 entry's payload is a chunk (not a pack)."""
    return len(payload) > 4 and payload[4] == KIND_CHUNK and payload[:3] == MAGIC


def decode_pack(
    raw: BackendMessage, message_id_from_bytes: MessageIdDecoder
) -> list[ImmutableMessage]:
    """The messages of the v2 pack ``raw`` (a whole entry: chunks already rebuilt)."""
    try:
        return _decode_pack(raw, message_id_from_bytes)
    except (DecodeError, UnsupportedLogFormatError):
        raise
    except Exception as exc:  # a truncated or garbled frame, whatever it trips
        raise DecodeError(f"message {raw.message_id}: {exc!r}") from exc


def _decode_pack(
    raw: BackendMessage, message_id_from_bytes: MessageIdDecoder
) -> list[ImmutableMessage]:
    data = raw.payload
    _check_frame(raw, data, KIND_PACK)
    _, _, _, pack_flags, lc_len, count, source, term = PACK_HEADER.unpack_from(data)
    if count < 1:
        raise DecodeError(f"message {raw.message_id}: an empty pack")
    offset = PACK_HEADER.size
    last_confirmed: MessageId | None = None
    if pack_flags & _PACK_HAS_LAST_CONFIRMED:
        last_confirmed = _message_id(raw, data[offset : offset + lc_len], message_id_from_bytes)
    offset += lc_len
    entry_id = raw.message_id
    unpack_message = MESSAGE_HEADER.unpack_from
    header_size = MESSAGE_HEADER.size
    unpack_property = _PROPERTY.unpack_from
    names = _TYPE_NAMES
    out: list[ImmutableMessage] = []
    for index in range(count):
        (
            flags,
            role,
            _,
            version,
            time_tick,
            producer_id,
            sequence,
            txn_id,
            type_len,
            vc_len,
            prop_count,
            payload_len,
        ) = unpack_message(data, offset)
        offset += header_size
        type_bytes = data[offset : offset + type_len]
        offset += type_len
        kind: MessageType | str
        if flags & FLAG_WAL_RECORD:
            found = MessageType.from_wire(type_bytes.decode())
            if found is None:
                raise UnsupportedLogFormatError(
                    entry_id, f"a WAL record of type {type_bytes.decode()!r}"
                )
            kind = found
        else:
            name = names.get(type_bytes)
            if name is None:
                name = type_bytes.decode()
                if len(names) < _TYPE_NAMES_MAX:
                    names[type_bytes] = name
            kind = name
        vchannel = data[offset : offset + vc_len].decode() if vc_len else ""
        offset += vc_len
        properties: Mapping[str, str] = NO_PROPERTIES
        if prop_count:
            read: dict[str, str] = {}
            for _ in range(prop_count):
                k_len, v_len = unpack_property(data, offset)
                offset += 8
                key = data[offset : offset + k_len].decode()
                offset += k_len
                read[key] = data[offset : offset + v_len].decode()
                offset += v_len
            properties = MappingProxyType(read)  # str keys and values: frozen as they are
        end = offset + payload_len
        if end > len(data):
            raise DecodeError(f"message {raw.message_id}: the pack is cut short")
        payload = data[offset:end]
        offset = end
        if flags & ~_KNOWN_FLAGS or version < 1 or time_tick > MAX_TIME_TICK:
            raise DecodeError(f"message {raw.message_id}: invalid header of message {index}")
        message_id = entry_id if count == 1 else entry_id.in_pack(index)
        has_txn = flags & FLAG_HAS_TXN
        if isinstance(kind, MessageType):
            expected_role = _MARKER_ROLES.get(kind, ROLE_NONE)
        else:
            expected_role = ROLE_MEMBER if has_txn else ROLE_NONE
        if role != expected_role:
            raise DecodeError(
                f"message {raw.message_id}: transaction role {role} of message {index} "
                f"does not match its type and transaction id"
            )
        if last_confirmed is None:
            if index != 0 or kind is not MessageType.TIME_TICK:
                raise DecodeError(
                    f"message {raw.message_id}: only an owner's first time tick confirms itself"
                )
            last_confirmed = message_id
        has_producer = flags & FLAG_HAS_PRODUCER
        out.append(
            built_immutable(
                message_id,
                kind,
                payload,
                time_tick,
                last_confirmed,
                source,
                vchannel,
                properties,
                version,
                producer_id if has_producer else None,
                sequence if has_producer else None,
                txn_id if has_txn else None,
                term,
            )
        )
    if offset != len(data):
        raise DecodeError(f"message {raw.message_id}: {len(data) - offset} bytes after the pack")
    return out


def peek_pack(raw: BackendMessage) -> tuple[int, bool, list[int]]:
    """``(source, first_time_tick, time ticks)`` of the v2 pack ``raw``, without
    decoding ids or payloads: what a fence read-back looks for."""
    data = raw.payload
    _check_frame(raw, data, KIND_PACK)
    _, _, _, pack_flags, lc_len, count, source, _ = PACK_HEADER.unpack_from(data)
    offset = PACK_HEADER.size + lc_len
    ticks: list[int] = []
    for _ in range(count):
        fields = MESSAGE_HEADER.unpack_from(data, offset)
        ticks.append(fields[4])
        offset += MESSAGE_HEADER.size + fields[8] + fields[9] + fields[11]
        for _ in range(fields[10]):
            k_len, v_len = _PROPERTY.unpack_from(data, offset)
            offset += 8 + k_len + v_len
    return source, not pack_flags & _PACK_HAS_LAST_CONFIRMED, ticks


def _message_id(
    raw: BackendMessage, data: bytes, message_id_from_bytes: MessageIdDecoder
) -> MessageId:
    global _last_decoded
    last = _last_decoded
    if last is not None and last[0] is message_id_from_bytes and last[1] == data:
        return last[2]
    message_id = message_id_from_bytes(data)
    if not isinstance(message_id, MessageId):
        raise DecodeError(f"message {raw.message_id}: its last-confirmed id is not a message id")
    _last_decoded = (message_id_from_bytes, data, message_id)
    return message_id


# The last last-confirmed id decoded, with its decoder and bytes: consecutive entries
# share one (each confirms what was persisted before a burst). One tuple, replaced whole.
_last_decoded: tuple[MessageIdDecoder, bytes, MessageId] | None = None


class ChunkHeader:
    """The header of one chunk of a v2 pack split across entries."""

    __slots__ = ("chunk_id", "count", "crc", "index", "size")

    def __init__(self, chunk_id: bytes, index: int, count: int, size: int, crc: int) -> None:
        self.chunk_id = chunk_id
        self.index = index
        self.count = count
        self.size = size
        self.crc = crc


def encode_chunk_header(header: ChunkHeader) -> bytes:
    return CHUNK_HEADER.pack(
        MAGIC,
        V2,
        KIND_CHUNK,
        0,
        header.chunk_id,
        header.index,
        header.count,
        header.size,
        header.crc,
    )


def decode_chunk_header(raw: BackendMessage) -> tuple[ChunkHeader, bytes]:
    """The chunk header of ``raw`` and its part of the pack; ``DecodeError`` if
    malformed (the chunk layer reports it as corruption)."""
    data = raw.payload
    _check_frame(raw, data, KIND_CHUNK)
    if len(data) < CHUNK_HEADER.size:
        raise DecodeError(f"message {raw.message_id}: a chunk header cut short")
    _, _, _, _, chunk_id, index, count, size, crc = CHUNK_HEADER.unpack_from(data)
    return ChunkHeader(chunk_id, index, count, size, crc), data[CHUNK_HEADER.size :]
