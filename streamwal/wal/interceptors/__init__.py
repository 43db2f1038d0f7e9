"""The WAL's interceptors; the chain order and the order in which the log's listeners
are told are declared in :mod:`streamwal.wal.interceptors.chain`."""

from streamwal.wal.interceptors.base import (
    AppendFunc,
    AppendResult,
    ChannelInfo,
    Interceptor,
    InterceptorBase,
    InterceptorParams,
    Sink,
    WALHandle,
)
from streamwal.wal.interceptors.chain import INTERCEPTOR_ORDER, InterceptorChain, InterceptorFactory

__all__ = [
    "INTERCEPTOR_ORDER",
    "AppendFunc",
    "AppendResult",
    "ChannelInfo",
    "Interceptor",
    "InterceptorBase",
    "InterceptorChain",
    "InterceptorFactory",
    "InterceptorParams",
    "Sink",
    "WALHandle",
]
