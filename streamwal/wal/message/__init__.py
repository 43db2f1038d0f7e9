"""Messages, their types, and their wire format."""

from streamwal.wal.message.codec import MessageIdDecoder, decode, encode
from streamwal.wal.message.message import ImmutableMessage, MutableMessage
from streamwal.wal.message.message_type import MessageType

__all__ = [
    "ImmutableMessage",
    "MessageIdDecoder",
    "MessageType",
    "MutableMessage",
    "decode",
    "encode",
]
