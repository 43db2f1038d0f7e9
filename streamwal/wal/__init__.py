"""The backend-neutral write-ahead log: messages, time ticks, buffer, MVCC, scanners.

Open a channel with :func:`open_wal` (owner) or :func:`open_read_only`; everything a
caller handles is exported here. Errors live in :mod:`streamwal.errors`, the backend contract
in :mod:`streamwal.wal.backend`.
"""

from streamwal.timestamps import TimestampAllocator
from streamwal.wal.backend import AccessMode, BackendOpener, DeliveryPolicy
from streamwal.wal.config import Backoff, WALConfig
from streamwal.wal.initializing import (
    FirstTimeTick,
    build_interceptor_params,
    open_read_only,
    open_wal,
    send_first_time_tick,
)
from streamwal.wal.interceptors import AppendResult, ChannelInfo, InterceptorParams
from streamwal.wal.message import ImmutableMessage, MessageType, MutableMessage, decode, encode
from streamwal.wal.message_id import MessageId
from streamwal.wal.mvcc import MVCCManager, VChannelMVCC
from streamwal.wal.scanner import Scanner
from streamwal.wal.wal import WAL, ReadOnlyWAL
from streamwal.wal.write_ahead_buffer import WriteAheadBuffer

__all__ = [
    "WAL",
    "AccessMode",
    "AppendResult",
    "BackendOpener",
    "Backoff",
    "ChannelInfo",
    "DeliveryPolicy",
    "FirstTimeTick",
    "ImmutableMessage",
    "InterceptorParams",
    "MVCCManager",
    "MessageId",
    "MessageType",
    "MutableMessage",
    "ReadOnlyWAL",
    "Scanner",
    "TimestampAllocator",
    "VChannelMVCC",
    "WALConfig",
    "WriteAheadBuffer",
    "build_interceptor_params",
    "decode",
    "encode",
    "open_read_only",
    "open_wal",
    "send_first_time_tick",
]
