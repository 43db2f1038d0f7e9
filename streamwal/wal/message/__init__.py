"""Messages, their types, and their wire format."""

from streamwal.wal.message.codec import MessageIdDecoder, decode, decode_entry, encode
from streamwal.wal.message.message import ImmutableMessage, MutableMessage
from streamwal.wal.message.message_type import MessageKind, MessageType

__all__ = [
    "ImmutableMessage",
    "MessageIdDecoder",
    "MessageKind",
    "MessageType",
    "MutableMessage",
    "decode",
    "decode_entry",
    "encode",
]
