"""Per-vchannel MVCC: the time tick a read of each vchannel can be served at.

Fed in log order with persisted messages and time ticks (persisted or in memory). A
message on vchannel ``v`` moves ``v`` to its time tick, unconfirmed: later messages may
still be in flight. A message for every vchannel (vchannel ``""``) does that to all
of them. A time tick confirms every vchannel up to it: nothing at or below it is in
flight any more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from streamwal.errors import ChannelFencedError
from streamwal.wal.message import ImmutableMessage, MessageType

__all__ = ["MVCCManager", "VChannelMVCC"]


class VChannelMVCC(NamedTuple):
    """``time_tick``: the latest persisted time tick of the vchannel (or the channel's
    latest time tick). ``confirmed``: whether every message at or below it is persisted.
    """

    time_tick: int
    confirmed: bool


class MVCCManager:
    """The MVCC state of one channel; synchronous, one event loop.

    A :class:`~streamwal.wal.listener.LogListener` of the owner's log, told first, so
    that a reader the write-ahead buffer wakes already finds MVCC up to date.
    """

    def __init__(self, first_time_tick: int) -> None:
        self._pchannel = VChannelMVCC(first_time_tick, confirmed=True)
        self._vchannels: dict[str, VChannelMVCC] = {}

    @property
    def pchannel(self) -> VChannelMVCC:
        """The state of the channel as a whole (what a vchannel without news sees)."""
        return self._pchannel

    def get(self, vchannel: str) -> VChannelMVCC:
        """The state of ``vchannel``; ``""`` is the channel as a whole."""
        if not vchannel:
            return self._pchannel
        return self._vchannels.get(vchannel, self._pchannel)

    def update(self, msg: ImmutableMessage) -> None:
        """Account for a persisted message (in log order)."""
        if msg.type is MessageType.TIME_TICK:
            self.sync(msg.time_tick)
        elif msg.vchannel:
            self._vchannels[msg.vchannel] = VChannelMVCC(msg.time_tick, confirmed=False)
        else:
            self._pchannel = VChannelMVCC(msg.time_tick, confirmed=False)
            self._vchannels.clear()

    def update_many(self, msgs: Sequence[ImmutableMessage]) -> None:
        """:meth:`update` for the messages of one pack, in log order."""
        vchannels = self._vchannels
        for msg in msgs:
            if msg.type is MessageType.TIME_TICK:
                self.sync(msg.time_tick)
            elif msg.vchannel:
                vchannels[msg.vchannel] = VChannelMVCC(msg.time_tick, confirmed=False)
            else:
                self._pchannel = VChannelMVCC(msg.time_tick, confirmed=False)
                vchannels.clear()

    def sync(self, time_tick: int) -> None:
        """A time tick: every vchannel is confirmed up to ``time_tick``."""
        if time_tick < self._pchannel.time_tick:
            return
        self._pchannel = VChannelMVCC(time_tick, confirmed=True)
        self._vchannels.clear()

    # the listener hooks are the methods themselves: one call less per append
    on_persisted = update
    on_persisted_many = update_many
    on_time_tick = sync

    def on_fenced(self, error: ChannelFencedError) -> None:
        """Nothing changes: what this owner persisted stays what reads are served at."""
        return None
