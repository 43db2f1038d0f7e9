"""The limits of a caller's message, checked before anything is written.

Beside the payload's bound (``wal.max_message_bytes``), a message's property map and
its type and vchannel have bounds of their own: log format v2 carries them in the
WAL's frame (``docs/wire-format.md``), and a map is metadata copied whole wherever the
message goes.
"""

from __future__ import annotations

from streamwal.errors import InvalidInputError
from streamwal.wal.message.message import MutableMessage
from streamwal.wal.message.message_type import MessageType

__all__ = ["MAX_PROPERTIES_BYTES", "check_append"]

MAX_PROPERTIES_BYTES = 1024 * 1024
"""The most bytes a message's properties may take (keys and values): a property map is
metadata, copied whole wherever the message goes; data belongs in the payload."""
_MAX_NAME_BYTES = 65_535  # a type or a vchannel, as log format v2 frames them


def check_append(msg: object, max_bytes: int) -> None:
    """What :meth:`streamwal.wal.WAL.append` takes: a caller's message (never a WAL
    record), within the limits; :class:`~streamwal.errors.InvalidInputError` else."""
    if not isinstance(msg, MutableMessage):
        raise InvalidInputError(f"append takes a MutableMessage, got {type(msg).__name__}")
    kind = msg.type
    if isinstance(kind, MessageType):  # a caller's type is a str, "TimeTick" included
        raise InvalidInputError(f"{kind} records are written by the WAL itself")
    if len(msg.payload) > max_bytes:
        raise InvalidInputError(
            f"a payload of {len(msg.payload)} bytes is over the largest message this WAL "
            f"takes, {max_bytes} bytes (wal.max_message_bytes)"
        )
    if len(kind) > _MAX_NAME_BYTES // 4 or len(msg.vchannel) > _MAX_NAME_BYTES // 4:
        for what, text in (("type", str(kind)), ("vchannel", msg.vchannel)):
            if len(text.encode()) > _MAX_NAME_BYTES:
                raise InvalidInputError(f"a message's {what} takes at most 65,535 bytes")
    properties = msg.properties
    if properties:
        size = 0
        for key, value in properties.items():
            size += len(key) + len(value)
        if size > MAX_PROPERTIES_BYTES // 4:
            size = sum(len(k.encode()) + len(v.encode()) for k, v in properties.items())
            if size > MAX_PROPERTIES_BYTES:
                raise InvalidInputError(
                    f"a message's properties take {size} bytes; at most "
                    f"{MAX_PROPERTIES_BYTES} (data belongs in the payload)"
                )
