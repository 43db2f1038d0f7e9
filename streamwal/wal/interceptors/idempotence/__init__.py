"""Idempotent appends: producer id + sequence number, a bounded window per producer."""

from streamwal.wal.interceptors.idempotence.interceptor import IdempotenceInterceptor
from streamwal.wal.interceptors.idempotence.window import ProducerTable

__all__ = ["IdempotenceInterceptor", "ProducerTable"]
