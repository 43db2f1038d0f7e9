"""Log format v1: one message per entry, its fields in the entry's string properties.

Kept to read logs written before format v2, and to write where a cluster still has a
node that reads v1 only (``docs/wire-format.md``, "Versions"). The WAL's fields are
properties whose keys start with ``_``, beside the caller's, so a v1 writer refuses a
caller's key there, and a caller's type must be one of the v1 names.
:func:`decode` raises :class:`~streamwal.errors.DecodeError` for anything that is not a
valid v1 message, and no other exception.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from streamwal.errors import DecodeError, InvalidInputError
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message.message import (
    MAX_TIME_TICK,
    RESERVED_PREFIX,
    ImmutableMessage,
    MutableMessage,
    built_immutable,
)
from streamwal.wal.message.message_type import MessageKind, MessageType, type_name
from streamwal.wal.message_id import MessageId

__all__ = [
    "KEY_LAST_CONFIRMED",
    "KEY_PRODUCER",
    "KEY_SEQUENCE",
    "KEY_SOURCE",
    "KEY_TIME_TICK",
    "KEY_TXN",
    "KEY_TYPE",
    "KEY_VCHANNEL",
    "KEY_VERSION",
    "V1_CALLER_TYPES",
    "MessageIdDecoder",
    "decode",
    "encode_stamped",
]

KEY_TYPE = "_t"
KEY_VERSION = "_v"
KEY_TIME_TICK = "_tt"
KEY_LAST_CONFIRMED = "_lc"
KEY_VCHANNEL = "_vc"
KEY_SOURCE = "_src"
KEY_PRODUCER = "_pid"
KEY_SEQUENCE = "_seq"
KEY_TXN = "_tx"

MessageIdDecoder = Callable[[bytes], MessageId]
"""A backend's ``message_id_from_bytes``."""

V1_CALLER_TYPES: dict[str, str] = {
    t: t
    for t in (
        MessageType.INSERT,
        MessageType.DELETE,
        MessageType.CREATE_COLLECTION,
        MessageType.DROP_COLLECTION,
        MessageType.FLUSH,
        MessageType.USER,
    )
}
"""The caller types format v1 can carry (its closed set), each name to itself."""

_NODE_NAMES = {
    "insert": MessageType.INSERT,
    "delete": MessageType.DELETE,
    "create_collection": MessageType.CREATE_COLLECTION,
    "drop_collection": MessageType.DROP_COLLECTION,
    "flush": MessageType.FLUSH,
    "user": MessageType.USER,
}
"""The names a node's API took for them before format v2: a cluster that still writes
v1 (an older node reads it) keeps taking them from clients, as those nodes did."""

_DECIMAL = re.compile(r"(?:0|[1-9][0-9]{0,19})")
_HEX = re.compile(r"(?:[0-9a-f]{2})+")


def encode_stamped(
    msg: MutableMessage, time_tick: int, last_confirmed: MessageId | None, source: int
) -> tuple[bytes, dict[str, str]]:
    """The payload and properties of ``msg`` stamped with the stamps given apart (the
    append path: no copy of ``msg``; :func:`streamwal.wal.message.codec.encode` checks a
    stamped message and picks the format).

    :class:`~streamwal.errors.InvalidInputError` for what v1 cannot carry: a caller's
    property key starting with ``_`` (v1's own fields are there), or a caller's type
    outside v1's names (a v1 reader takes ``TimeTick`` for the WAL's own).
    """
    kind = msg.type
    if isinstance(kind, str) and kind not in V1_CALLER_TYPES:
        kind = _NODE_NAMES.get(kind, kind)
    if type(kind) is not MessageType and kind not in V1_CALLER_TYPES:
        raise InvalidInputError(
            f"message type {type_name(kind)!r}: this channel writes log format v1, whose "
            f"caller types are {', '.join(V1_CALLER_TYPES)}"
        )
    for key in msg.properties:
        if not key or key.startswith(RESERVED_PREFIX):
            raise InvalidInputError(
                f"property key {key!r}: this channel writes log format v1, which reserves "
                f"keys starting with {RESERVED_PREFIX!r} (and the empty key)"
            )
    properties = {
        KEY_TYPE: type_name(kind),
        KEY_VERSION: str(msg.version),
        KEY_TIME_TICK: str(time_tick),
        KEY_SOURCE: str(source),
    }
    if msg.properties:  # user keys never start with "_": no clash with the ones above
        properties.update(msg.properties)
    if msg.vchannel:
        properties[KEY_VCHANNEL] = msg.vchannel
    if last_confirmed is not None:
        properties[KEY_LAST_CONFIRMED] = last_confirmed.to_bytes().hex()
    if msg.producer_id is not None:
        properties[KEY_PRODUCER] = str(msg.producer_id)
        properties[KEY_SEQUENCE] = str(msg.sequence)
    if msg.txn_id is not None:
        properties[KEY_TXN] = str(msg.txn_id)
    return msg.payload, properties


def decode(raw: BackendMessage, message_id_from_bytes: MessageIdDecoder) -> ImmutableMessage:
    """The streamwal message persisted as ``raw``; :class:`~streamwal.errors.DecodeError` if
    none."""
    try:
        return _decode(raw, message_id_from_bytes)
    except DecodeError:
        raise
    except Exception as exc:  # whatever a foreign entry trips, it is reported as one kind
        raise DecodeError(f"message {raw.message_id}: {exc!r}") from exc


def _decode(raw: BackendMessage, message_id_from_bytes: MessageIdDecoder) -> ImmutableMessage:
    props = raw.properties
    if not isinstance(props, Mapping) or not isinstance(raw.payload, bytes | bytearray):
        raise DecodeError(f"message {raw.message_id}: not a payload with string properties")
    wire_type = _required(raw, KEY_TYPE)
    msg_type: MessageKind | None = MessageType.from_wire(wire_type) or V1_CALLER_TYPES.get(
        wire_type
    )
    if msg_type is None:
        raise DecodeError(f"message {raw.message_id}: unknown message type {wire_type!r}")
    version = _decimal(raw, KEY_VERSION)
    if version < 1:
        raise DecodeError(f"message {raw.message_id}: version must be >= 1, got {version}")
    time_tick = _decimal(raw, KEY_TIME_TICK)
    if time_tick > MAX_TIME_TICK:
        raise DecodeError(f"message {raw.message_id}: time tick {time_tick} exceeds 2**64 - 1")
    source = _decimal(raw, KEY_SOURCE)
    vchannel = props.get(KEY_VCHANNEL, "")
    if not isinstance(vchannel, str):
        raise DecodeError(f"message {raw.message_id}: {KEY_VCHANNEL} is not a string")
    last_confirmed = _last_confirmed(raw, msg_type, message_id_from_bytes)
    producer_id = _optional_decimal(raw, KEY_PRODUCER)
    sequence = _optional_decimal(raw, KEY_SEQUENCE)
    if (producer_id is None) != (sequence is None):
        raise DecodeError(f"message {raw.message_id}: {KEY_PRODUCER} without {KEY_SEQUENCE}")
    txn_id = _optional_decimal(raw, KEY_TXN)
    user = {k: v for k, v in props.items() if not k.startswith(RESERVED_PREFIX)}
    for key, value in user.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise DecodeError(f"message {raw.message_id}: property {key!r} is not a string")
    return built_immutable(
        raw.message_id,
        msg_type,
        bytes(raw.payload),
        time_tick,
        last_confirmed,
        source,
        vchannel,
        user,
        version,
        producer_id,
        sequence,
        txn_id,
    )


def _required(raw: BackendMessage, key: str) -> str:
    value = raw.properties.get(key)
    if value is None:
        raise DecodeError(f"message {raw.message_id}: not a streamwal message (no {key!r})")
    if not isinstance(value, str):
        raise DecodeError(f"message {raw.message_id}: {key!r} is not a string")
    return value


def _decimal(raw: BackendMessage, key: str) -> int:
    text = _required(raw, key)
    if not _DECIMAL.fullmatch(text):
        raise DecodeError(f"message {raw.message_id}: {key!r} is not a decimal integer: {text!r}")
    return int(text)


def _optional_decimal(raw: BackendMessage, key: str) -> int | None:
    if key not in raw.properties:
        return None
    value = _decimal(raw, key)
    if value > MAX_TIME_TICK:
        raise DecodeError(f"message {raw.message_id}: {key!r} exceeds 2**64 - 1")
    return value


def _last_confirmed(
    raw: BackendMessage, msg_type: MessageKind, message_id_from_bytes: MessageIdDecoder
) -> MessageId:
    text = raw.properties.get(KEY_LAST_CONFIRMED)
    if text is None:
        if msg_type is not MessageType.TIME_TICK:
            raise DecodeError(
                f"message {raw.message_id}: a {msg_type} needs {KEY_LAST_CONFIRMED!r}"
            )
        return raw.message_id  # an owner's first time tick confirms itself
    global _last_decoded
    last = _last_decoded
    if last is not None and last[0] is message_id_from_bytes and last[1] == text:
        return last[2]
    if not isinstance(text, str) or not _HEX.fullmatch(text):
        raise DecodeError(
            f"message {raw.message_id}: {KEY_LAST_CONFIRMED!r} is not lowercase hex: {text!r}"
        )
    message_id = message_id_from_bytes(bytes.fromhex(text))
    if not isinstance(message_id, MessageId):
        raise DecodeError(f"message {raw.message_id}: {KEY_LAST_CONFIRMED!r} is not a message id")
    _last_decoded = (message_id_from_bytes, text, message_id)
    return message_id


# The last last-confirmed id decoded, with its decoder and text: the messages of a burst
# share one (each confirms what was persisted before the burst), and decoding it (hex,
# the backend's id, the checks) is a large part of a catch-up read's decoding. Ids are
# immutable values, so messages may share the object; one tuple, replaced whole.
_last_decoded: tuple[MessageIdDecoder, str, MessageId] | None = None
