"""The node's gRPC message limits, derived from the WAL's largest message.

One number is configured (``wal.max_message_bytes``); the gRPC limits follow from it,
so a message the WAL takes is never refused by the transport first, and one it would
refuse mostly never reaches it.
"""

from __future__ import annotations

from streamwal.wal.config import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["GRPC_ENVELOPE_BYTES", "grpc_message_limit"]

#: what a request or a consumed frame carries beyond one message's payload: its
#: properties, ids and the protobuf framing (properties are bounded by the backend's
#: entry, a few MiB, but 1 MiB covers any sane use; more is refused by gRPC)
GRPC_ENVELOPE_BYTES = 1024 * 1024


def grpc_message_limit(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> int:
    """The gRPC message limit for payloads up to ``max_message_bytes``.

    A client cannot see a node's setting, so it sizes itself for the default; a node
    configured larger needs its clients built with the same value.
    """
    return max_message_bytes + GRPC_ENVELOPE_BYTES
