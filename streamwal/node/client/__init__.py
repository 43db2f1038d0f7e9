"""The asyncio client of one streaming node.

Every failure it raises is a typed :class:`~streamwal.errors.StreamwalError`
(:mod:`streamwal.node.client_errors`): the library's type for the condition, with the
append's write outcome (``outcome``) and the gRPC status (``code()``, ``details()``).
Appends are idempotent by default (a :class:`~streamwal.node.idempotence.ProducerIdentity`
numbers each, on unary calls, streams and batches alike): ``retries`` then covers
unknown outcomes too (UNKNOWN, UNAVAILABLE, DEADLINE_EXCEEDED), with the same numbers,
and the node answers a retry of an append it already has with the first result. An
append's outcome is the strongest of all its tries: once any try may have reached the
node, the append is never reported "not written" and its number is never handed back,
whatever the last try said. With ``idempotent=False`` only appends the node answered
"not written" are retried, since a retry could write the append twice.
A node with ``node.tls`` needs ``tls`` here, with a client certificate when the node
requires one (``node.tls.ca_file``); a refused handshake shows up as UNAVAILABLE.

The client is split by role: :mod:`~streamwal.node.client.calls` (the connection and
the unary calls), :mod:`~streamwal.node.client.coalescer` (concurrent unary appends
sharing calls), :mod:`~streamwal.node.client.streams` (stream calls),
:mod:`~streamwal.node.client.append_stream` (:class:`AppendStream`, a stream taking
one append at a time), :mod:`~streamwal.node.client.retries` (when a call is tried
again, what a failed append ends with), :mod:`~streamwal.node.client.answers` (what
the node's answers become), :mod:`~streamwal.node.client.base` (numbering appends)
and :mod:`~streamwal.node.client.traced` (each call's span and token).
Every name is importable from here.
"""

from __future__ import annotations

from streamwal.node.client.answers import Acked, BatchProduceError, Consumed, grpc_code_of
from streamwal.node.client.append_stream import AppendStream
from streamwal.node.client.calls import NodeClient
from streamwal.node.client.retries import final_error, give_up
from streamwal.node.client.streams import WireMessageId, policy, wire_policy
from streamwal.node.outcome import write_outcome

__all__ = [
    "Acked",
    "AppendStream",
    "BatchProduceError",
    "Consumed",
    "NodeClient",
    "WireMessageId",
    "final_error",
    "give_up",
    "grpc_code_of",
    "policy",
    "wire_policy",
    "write_outcome",
]
