"""TSO: an etcd-lease timestamp oracle whose timestamps never go back.

The oracle (:class:`TimestampOracle`) is the leader side, after TiDB PD; callers use
a :class:`LocalAllocator` over a source: :class:`OracleSource` in-process, or
:class:`RemoteSource` on the gRPC service (:class:`TsoServer`) of the leader.
"""

# This folder is also streamwal/tso (a symlink): loaded by its bare name it would
# be a second copy of every class, so that name is refused.
if __name__ != "streamwal.tso":
    raise ImportError(f"import streamwal.tso, not {__name__} (streamwal is the import root)")

from streamwal.tso.allocator import LocalAllocator, TimestampAllocator, TimestampSource
from streamwal.tso.clock import Clock, ManualClock, SystemClock
from streamwal.tso.config import DEFAULT_ETCD_ENDPOINT, EtcdConfig, TsoConfig
from streamwal.tso.etcd_store import EtcdStore
from streamwal.tso.inprocess import InProcessTSO, OracleSource
from streamwal.tso.memory_store import MemoryStore
from streamwal.tso.oracle import OracleStats, TimestampOracle
from streamwal.tso.remote import RemoteSource
from streamwal.tso.service import TimestampGenerator, TsoServer, TsoServicer, add_tso_servicer
from streamwal.tso.store import CoordinationStore, LeaderRecord
from streamwal.tso.timestamp import (
    LOGICAL_BITS,
    MAX_LOGICAL,
    HybridTimestamp,
    compose,
    format_timestamp,
    parse_timestamp,
    physical_datetime,
    split,
)
from streamwal.tso.tls import ClientTLS

__all__ = [
    "DEFAULT_ETCD_ENDPOINT",
    "LOGICAL_BITS",
    "MAX_LOGICAL",
    "ClientTLS",
    "Clock",
    "CoordinationStore",
    "EtcdConfig",
    "EtcdStore",
    "HybridTimestamp",
    "InProcessTSO",
    "LeaderRecord",
    "LocalAllocator",
    "ManualClock",
    "MemoryStore",
    "OracleSource",
    "OracleStats",
    "RemoteSource",
    "SystemClock",
    "TimestampAllocator",
    "TimestampGenerator",
    "TimestampOracle",
    "TimestampSource",
    "TsoConfig",
    "TsoServer",
    "TsoServicer",
    "add_tso_servicer",
    "compose",
    "format_timestamp",
    "parse_timestamp",
    "physical_datetime",
    "split",
]
