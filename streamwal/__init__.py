"""streamwal: a write-ahead log for a streaming node, on Apache Pulsar.

The names here are the library's whole surface for a user::

    opener = streamwal.PulsarOpener(streamwal.PulsarConfig(service_url=...))
    tso = streamwal.InProcessTSO(streamwal.TsoConfig(etcd_endpoints=(...,)))
    wal = await streamwal.open_wal(opener, "channel", tso.allocator(), node_id=1)

Everything else lives in sub-packages: :mod:`streamwal.wal` (the backend-neutral
WAL and its backend contract), :mod:`streamwal.adaptors` (the Pulsar and in-memory
backends, and the conformance suite), :mod:`streamwal.tso` (the timestamp oracle),
:mod:`streamwal.node` (the gRPC service and ``streamwal trace``),
:mod:`streamwal.cluster` (the self-managing cluster) and :mod:`streamwal.verify`
(``streamwal verify``). The developer tools (local stack, demo, benchmarks, chaos
runner) are another distribution, ``streamwal-lab`` (package ``streamwal_lab``),
which this package never imports.
"""

from importlib.metadata import PackageNotFoundError, version

from streamwal.adaptors.pulsar import PolicyAction, PulsarConfig, PulsarOpener
from streamwal.errors import (
    ChannelFencedError,
    ChannelNotFoundError,
    ClosedError,
    ConfigError,
    DecodeError,
    EvictedError,
    ExclusivityNotEnforcedError,
    InvalidInputError,
    MisconfiguredError,
    NotLeaderError,
    OutcomeUnknownError,
    QuotaExceededError,
    StreamwalError,
    TimestampRegressionError,
    TruncatedError,
    UnavailableError,
    UnknownPositionError,
    UnsafeBrokerPolicyError,
    WriteOutcome,
)
from streamwal.tso import InProcessTSO, LocalAllocator, RemoteSource, TsoConfig
from streamwal.wal import (
    WAL,
    AppendResult,
    Backoff,
    DeliveryPolicy,
    ImmutableMessage,
    MessageId,
    MessageType,
    MutableMessage,
    ReadOnlyWAL,
    Scanner,
    WALConfig,
    open_read_only,
    open_wal,
)

try:
    __version__ = version("streamwal")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "WAL",
    "AppendResult",
    "Backoff",
    "ChannelFencedError",
    "ChannelNotFoundError",
    "ClosedError",
    "ConfigError",
    "DecodeError",
    "DeliveryPolicy",
    "EvictedError",
    "ExclusivityNotEnforcedError",
    "ImmutableMessage",
    "InProcessTSO",
    "InvalidInputError",
    "LocalAllocator",
    "MessageId",
    "MessageType",
    "MisconfiguredError",
    "MutableMessage",
    "NotLeaderError",
    "OutcomeUnknownError",
    "PolicyAction",
    "PulsarConfig",
    "PulsarOpener",
    "QuotaExceededError",
    "ReadOnlyWAL",
    "RemoteSource",
    "Scanner",
    "StreamwalError",
    "TimestampRegressionError",
    "TruncatedError",
    "TsoConfig",
    "UnavailableError",
    "UnknownPositionError",
    "UnsafeBrokerPolicyError",
    "WALConfig",
    "WriteOutcome",
    "__version__",
    "open_read_only",
    "open_wal",
]
