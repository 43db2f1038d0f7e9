"""Messages, their types, and their wire format."""

from wal.message.codec import MessageIdDecoder, decode, encode
from wal.message.message import ImmutableMessage, MutableMessage
from wal.message.message_type import MessageType

__all__ = [
    "ImmutableMessage",
    "MessageIdDecoder",
    "MessageType",
    "MutableMessage",
    "decode",
    "encode",
]
