"""What a listener of the owner's log is told, and when.

The persisting interceptor's sequencer releases results in log order; each persisted
message and each in-memory time tick is then published to the WAL's log listeners,
one after the other, in the order declared in :mod:`streamwal.wal.interceptors.chain`
(MVCC, the write-ahead buffer, then the interceptors that listen). The fence is
published to them the same way, once. Hooks are synchronous, so a listener sees the
log exactly as far as the sequencer has released it, and must not raise: one that does
is logged and the others are still told.

The messages of one pack (one log entry) are released together: a listener with an
``on_persisted_many(msgs)`` hook is told of them in one call, in log order, which
saves it the per-message work that can be done once per pack (a clock read, waking
readers, evicting); one without it gets ``on_persisted`` for each. Either way it sees
every message, one after the other.
"""

from __future__ import annotations

from typing import Protocol

from streamwal.errors import ChannelFencedError
from streamwal.wal.message import ImmutableMessage

__all__ = ["LogListener"]


class LogListener(Protocol):
    """Told of the owner's log, in log order; synchronous, never raises."""

    def on_persisted(self, msg: ImmutableMessage) -> None:
        """``msg`` is in the log, after everything published before it."""
        ...

    def on_time_tick(self, time_tick: int) -> None:
        """An in-memory time tick: no persisted message at or below it is still to come."""
        ...

    def on_fenced(self, error: ChannelFencedError) -> None:
        """Told once, when another owner took the channel (the fence is already set)."""
        ...
