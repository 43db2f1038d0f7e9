"""The backend-neutral write-ahead log: messages, time ticks, buffer, MVCC, scanners.

Open a channel with :func:`open_wal` (owner) or :func:`open_read_only`; everything a
caller handles is exported here. Errors live in :mod:`wal.errors`, the backend contract
in :mod:`wal.backend`.
"""

from wal.backend import AccessMode, BackendOpener, DeliveryPolicy
from wal.buffer import WriteAheadBuffer
from wal.config import Backoff, WALConfig
from wal.initializing import (
    FirstTimeTick,
    build_interceptor_params,
    open_read_only,
    open_wal,
    send_first_time_tick,
)
from wal.interceptors import AppendResult, ChannelInfo, InterceptorParams
from wal.message import ImmutableMessage, MessageType, MutableMessage, decode, encode
from wal.message_id import MessageId
from wal.mvcc import MVCCManager, VChannelMVCC
from wal.scanner import Scanner
from wal.timestamps import TimestampAllocator
from wal.wal import WAL, ReadOnlyWAL

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
