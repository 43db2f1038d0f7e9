"""The node's gRPC message limits, derived from the WAL's largest message.

One number is configured (``wal.max_message_bytes``, 64 MiB by default); the gRPC
limits follow from it, so a message the WAL takes is never refused by the transport
first, and one it would refuse mostly never reaches it. The server sets both
directions to :func:`grpc_message_limit` of its setting; a client (``NodeClient``, and
through it ``ClusterClient``) receives up to :data:`DEFAULT_GRPC_MESSAGE_LIMIT`.

Why 64 MiB plus an envelope, not gRPC's 4 MiB default or a round 16 MiB: a message
larger than the broker's entry (Pulsar's ``maxMessageSize``, 5 MiB on a stock broker)
is written as chunks inside the WAL (:mod:`streamwal.wal.chunking`), but on the wire
to and from a node it travels whole: an append carries the full payload, and a
consumed frame carries one message reassembled. So each gRPC message must hold the
largest payload the WAL accepts; a smaller limit would refuse, on the transport, the
64 MiB appends the WAL takes and the reads of them (tests/integration/
test_chunked_messages.py sends and reads 64 MiB through a node process).
"""

from __future__ import annotations

from streamwal.wal.config import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["DEFAULT_GRPC_MESSAGE_LIMIT", "GRPC_ENVELOPE_BYTES", "grpc_message_limit"]

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


#: the limit for the default ``wal.max_message_bytes`` (65 MiB): a node's with the
#: default setting, and every client's
DEFAULT_GRPC_MESSAGE_LIMIT = grpc_message_limit(DEFAULT_MAX_MESSAGE_BYTES)
