"""The write-ahead-buffer feed: persisted messages and time ticks go to the buffer.

A fenced channel seals the buffer, so its readers move on to the backend, where the
new owner's messages are.
"""

from __future__ import annotations

from streamwal.errors import ChannelFencedError
from streamwal.wal.interceptors.base import InterceptorBase
from streamwal.wal.message import ImmutableMessage

__all__ = ["WriteAheadBufferInterceptor"]


class WriteAheadBufferInterceptor(InterceptorBase):
    def on_persisted(self, msg: ImmutableMessage) -> None:
        self.params.buffer.append(msg)

    def on_time_tick(self, time_tick: int) -> None:
        self.params.buffer.append_time_tick(time_tick)

    def on_fenced(self, error: ChannelFencedError) -> None:
        self.params.buffer.seal()

    async def close(self) -> None:
        self.params.buffer.seal()
