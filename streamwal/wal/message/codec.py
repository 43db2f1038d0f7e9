"""The wire format: messages as the backend's entries (payload, string properties).

``docs/wire-format.md`` is the specification; :mod:`streamwal.wal.message.codec_v1` (one
message per entry, the WAL's fields in ``_`` properties) and
:mod:`streamwal.wal.message.frame` (format v2: a pack of messages in a frame of the
WAL's own) implement its two versions, and this module picks one per entry. The
version is read outside the caller's data: an entry with the backend property
``swf`` is of that format version; one without it is v1.

:func:`decode_entry` raises :class:`~streamwal.errors.DecodeError` for an entry that is
not streamwal's (a reader may skip it) and
:class:`~streamwal.errors.UnsupportedLogFormatError` for one of a newer format (a
reader must not skip it), and no other exception.
"""

from __future__ import annotations

from typing import Final

from streamwal.errors import DecodeError, InvalidInputError, UnsupportedLogFormatError
from streamwal.wal.backend import BackendMessage, DeliveryPolicy
from streamwal.wal.message import codec_v1
from streamwal.wal.message.codec_v1 import (
    KEY_LAST_CONFIRMED,
    KEY_SOURCE,
    KEY_TIME_TICK,
    KEY_TYPE,
    MessageIdDecoder,
)
from streamwal.wal.message.frame import (
    FORMAT_PROPERTY,
    V2,
    V2_PROPERTIES,
    decode_pack,
    encode_pack,
    peek_pack,
)
from streamwal.wal.message.message import ImmutableMessage, MutableMessage
from streamwal.wal.message.message_type import MessageType
from streamwal.wal.message_id import MessageId

__all__ = [
    "FORMAT_PROPERTY",
    "LOG_FORMATS",
    "LOG_FORMAT_V1",
    "LOG_FORMAT_V2",
    "MessageIdDecoder",
    "decode",
    "decode_entry",
    "encode",
    "encode_stamped",
    "entry_format",
    "from_position",
    "log_format_number",
    "peek",
]

LOG_FORMAT_V1: Final = 1
LOG_FORMAT_V2: Final = V2
LOG_FORMATS: Final = (LOG_FORMAT_V1, LOG_FORMAT_V2)
"""The log formats this version reads (and may write)."""


def log_format_number(name: str | int) -> int:
    """``"v1"``/``"v2"`` (or 1/2) as the format's number; ``InvalidInputError`` else."""
    if isinstance(name, int) and not isinstance(name, bool) and name in LOG_FORMATS:
        return name
    if isinstance(name, str) and name in ("v1", "v2"):
        return int(name[1])
    raise InvalidInputError(f"log format {name!r}: one of v1, v2")


def entry_format(raw: BackendMessage) -> int:
    """The format version of the entry ``raw`` (from its ``swf`` property; 1 without).
    :class:`~streamwal.errors.UnsupportedLogFormatError` for a version this reader does
    not know."""
    if FORMAT_PROPERTY not in raw.properties:
        return LOG_FORMAT_V1
    text = raw.properties[FORMAT_PROPERTY]
    if text == "2":
        return LOG_FORMAT_V2
    if not isinstance(text, str):  # a broker hands text: this entry is corrupt, not newer
        raise DecodeError(f"message {raw.message_id}: log format property {text!r}")
    raise UnsupportedLogFormatError(raw.message_id, f"log format {text!r}")


def decode_entry(
    raw: BackendMessage, message_id_from_bytes: MessageIdDecoder
) -> list[ImmutableMessage]:
    """The messages persisted in the entry ``raw`` (a whole entry: chunks rebuilt), in
    order: one for v1, the pack's N >= 1 for v2."""
    if entry_format(raw) == LOG_FORMAT_V2:
        return decode_pack(raw, message_id_from_bytes)
    return [codec_v1.decode(raw, message_id_from_bytes)]


def decode(raw: BackendMessage, message_id_from_bytes: MessageIdDecoder) -> ImmutableMessage:
    """The one message of the entry ``raw``; :class:`~streamwal.errors.DecodeError` for
    a pack of several (read those with :func:`decode_entry`)."""
    msgs = decode_entry(raw, message_id_from_bytes)
    if len(msgs) != 1:
        raise DecodeError(f"message {raw.message_id}: a pack of {len(msgs)} messages")
    return msgs[0]


def encode(
    msg: MutableMessage, *, log_format: int = LOG_FORMAT_V2, term: int = 0
) -> tuple[bytes, dict[str, str]]:
    """The payload and properties to hand to the backend.

    The message must be stamped (time tick and source); only a time tick may lack a
    last-confirmed id (it then confirms itself). Raises
    :class:`~streamwal.errors.InvalidInputError` otherwise.
    """
    if msg.time_tick is None or msg.source is None:
        raise InvalidInputError("only a stamped message (time tick and source) can be encoded")
    if msg.last_confirmed is None and msg.type is not MessageType.TIME_TICK:
        raise InvalidInputError(f"a {msg.type} message needs a last-confirmed id")
    return encode_stamped(
        msg,
        msg.time_tick,
        msg.last_confirmed,
        msg.source,
        log_format=log_format,
        term=term,
    )


def encode_stamped(
    msg: MutableMessage,
    time_tick: int,
    last_confirmed: MessageId | None,
    source: int,
    *,
    log_format: int = LOG_FORMAT_V2,
    term: int = 0,
) -> tuple[bytes, dict[str, str]]:
    """:func:`encode` with the stamps given apart (the append path: no copy of ``msg``):
    a pack of this one message in v2, or v1's properties (v1 has no term)."""
    if log_format == LOG_FORMAT_V2:
        return encode_pack(((msg, time_tick),), last_confirmed, source, term), dict(V2_PROPERTIES)
    return codec_v1.encode_stamped(msg, time_tick, last_confirmed, source)


def peek(raw: BackendMessage) -> tuple[int, bool, list[int]]:
    """``(source, first_time_tick, time ticks)`` of the entry ``raw``, without decoding
    ids or payloads: whether it is an owner's first time tick (one that confirms itself)
    and which time ticks of which owner it holds. ``DecodeError`` (or
    ``UnsupportedLogFormatError``) if it is not streamwal's."""
    if entry_format(raw) == LOG_FORMAT_V2:
        return peek_pack(raw)
    props = raw.properties
    try:
        source = int(props[KEY_SOURCE])
        tick = int(props[KEY_TIME_TICK])
    except (KeyError, ValueError) as exc:
        raise DecodeError(f"message {raw.message_id}: {exc!r}") from None
    first = (
        props.get(KEY_TYPE) == MessageType.TIME_TICK.wire_name and KEY_LAST_CONFIRMED not in props
    )
    return source, first, [tick]


def from_position(msgs: list[ImmutableMessage], policy: DeliveryPolicy) -> list[ImmutableMessage]:
    """The messages of the first entry a read at ``policy`` got, from its position on:
    a position inside a pack names one of its messages, and the backend delivers the
    whole entry."""
    start = policy.message_id
    if start is None:
        return msgs
    if policy.kind == DeliveryPolicy.START_FROM:
        return [m for m in msgs if not m.message_id < start]
    if policy.kind == DeliveryPolicy.START_AFTER:
        return [m for m in msgs if start < m.message_id]
    return msgs
