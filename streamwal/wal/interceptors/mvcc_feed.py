"""The MVCC hook: keeps the channel's :class:`~streamwal.wal.mvcc.MVCCManager` in step with
the log."""

from __future__ import annotations

from streamwal.wal.interceptors.base import InterceptorBase
from streamwal.wal.message import ImmutableMessage

__all__ = ["MvccInterceptor"]


class MvccInterceptor(InterceptorBase):
    """Updates MVCC from persisted messages and confirms it at every time tick."""

    def on_persisted(self, msg: ImmutableMessage) -> None:
        self.params.mvcc.update(msg)

    def on_time_tick(self, time_tick: int) -> None:
        self.params.mvcc.sync(time_tick)
