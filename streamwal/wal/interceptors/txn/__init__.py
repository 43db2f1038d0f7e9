"""Transactions per vchannel: begin, append into, commit or roll back, expire."""

from streamwal.wal.interceptors.txn.interceptor import TxnInterceptor
from streamwal.wal.interceptors.txn.session import TxnSession, TxnState

__all__ = ["TxnInterceptor", "TxnSession", "TxnState"]
