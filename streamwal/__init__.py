"""streamwal: a write-ahead log for a streaming node, on Apache Pulsar.

The names here are what a user needs, and no more::

    opener = streamwal.PulsarOpener(streamwal.PulsarConfig(service_url=...))
    tso = streamwal.InProcessTSO(streamwal.TsoConfig(streamwal.EtcdConfig(endpoints=(...,))))
    wal = await streamwal.open_wal(opener, "channel", tso.allocator(), node_id=1)

or, through a cluster of nodes, ``streamwal.ClusterClient`` (loaded on first use, so
that ``import streamwal`` does not load the cluster's client). The errors here are the
root, :class:`StreamwalError`, and those a caller acts on; every error type is in
:mod:`streamwal.errors`.

Everything else lives in sub-packages: :mod:`streamwal.wal` (the backend-neutral
WAL and its backend contract: ``WAL``, ``AppendResult``, ``MessageId``, ...),
:mod:`streamwal.adaptors` (the Pulsar and in-memory backends, and the conformance
suite), :mod:`streamwal.tso` (the timestamp oracle: ``LocalAllocator``,
``RemoteSource``), :mod:`streamwal.node` (the gRPC service and ``streamwal trace``),
:mod:`streamwal.cluster` (the self-managing cluster), :mod:`streamwal.server` (a node
process, ``streamwal serve``) and :mod:`streamwal.verify`
(``streamwal verify``). The developer tools (local stack, demo, benchmarks, chaos
runner) are another distribution, ``streamwal-lab`` (package ``streamwal_lab``),
which this package never imports.
"""

from typing import TYPE_CHECKING

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.errors import (
    BatchAppendError,
    ChannelFencedError,
    ClosedError,
    OutcomeUnknownError,
    SequenceError,
    StreamwalError,
    TransactionError,
    TruncatedError,
    UnavailableError,
)
from streamwal.tso import EtcdConfig, InProcessTSO, TsoConfig
from streamwal.version import __version__
from streamwal.wal import (
    DeliveryPolicy,
    ImmutableMessage,
    MessageType,
    MutableMessage,
    WALConfig,
    open_read_only,
    open_wal,
)

if TYPE_CHECKING:
    from streamwal.cluster import ClusterClient

__all__ = [
    "BatchAppendError",
    "ChannelFencedError",
    "ClosedError",
    "ClusterClient",
    "DeliveryPolicy",
    "EtcdConfig",
    "ImmutableMessage",
    "InProcessTSO",
    "MessageType",
    "MutableMessage",
    "OutcomeUnknownError",
    "PulsarConfig",
    "PulsarOpener",
    "SequenceError",
    "StreamwalError",
    "TransactionError",
    "TruncatedError",
    "TsoConfig",
    "UnavailableError",
    "WALConfig",
    "__version__",
    "open_read_only",
    "open_wal",
]


def __getattr__(name: str) -> object:
    """``ClusterClient``, imported on first use (it loads the node's gRPC client)."""
    if name == "ClusterClient":
        from streamwal.cluster import ClusterClient

        globals()[name] = ClusterClient
        return ClusterClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
