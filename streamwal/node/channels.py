"""The channels this node owns: open (take over), look up, drop, close.

Opening is serialized per channel, so two ``AssignChannel`` calls for one channel
that overlap share one open. A later call takes the channel over again: a WAL that was
fenced while quiet does not know it (only an append tells), so answering from it would
leave the caller believing this node owns the channel. The new WAL is opened before
the old one is closed: its producer fences the old one on the broker, so closing the
old one sends the broker nothing. (A client closing a producer while another
producer's creation fences it can deadlock a Pulsar 4.0.7 broker.) A WAL found fenced
(another node took the channel) is dropped and remembered, so ``ListChannels`` can
report it once. A channel given up here stops showing in ``/metrics``
(:mod:`streamwal.node.metric_scope`).

Who places channels: by default whoever calls ``AssignChannel``/``RemoveChannel``.
A layer that places them itself (a cluster) says so with :meth:`ChannelManager.place_by`,
and the node refuses those calls from then on, naming the supported way; the layer
keeps calling :meth:`ChannelManager.assign` and :meth:`ChannelManager.remove`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from streamwal.errors import (
    ChannelFencedError,
    ChannelNotFoundError,
    ClosedError,
    PlacementRefusedError,
)
from streamwal.node import metric_scope
from streamwal.node.read_only import ReadOnlyChannels
from streamwal.tso import LocalAllocator
from streamwal.wal.backend import BackendOpener, validate_channel_name
from streamwal.wal.config import WALConfig
from streamwal.wal.initializing import open_wal
from streamwal.wal.wal import WAL

__all__ = ["ChannelManager", "OpenResult"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenResult:
    wal: WAL
    newly_opened: bool


class ChannelManager:
    """Owns the WALs of this node; every method is safe to call concurrently."""

    def __init__(
        self,
        opener: BackendOpener,
        allocator_factory: Callable[[], LocalAllocator],
        node_id: int,
        config: WALConfig,
        open_wal_fn: Callable[..., Coroutine[Any, Any, WAL]] = open_wal,
    ) -> None:
        self._opener = opener
        self._allocator_factory = allocator_factory
        self._node_id = node_id
        self._config = config
        self._open_wal = open_wal_fn
        self._wals: dict[str, WAL] = {}
        self._allocators: dict[str, LocalAllocator] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._opens: dict[str, int] = {}  # successful opens per channel
        self._fenced: list[str] = []
        self._closed = False
        self._placed_by: str | None = None
        self.read_only = ReadOnlyChannels(opener, config)
        """Read-only handles of any channel, owned here or not (``ConsumeRequest.read_only``)."""

    @property
    def node_id(self) -> int:
        return self._node_id

    def place_by(self, how: str) -> None:
        """Channels here are placed by another layer from now on; ``how`` tells an
        operator the supported way to move one (the refusal of a direct call says it)."""
        self._placed_by = how

    def check_direct_placement(self, action: str) -> None:
        """:class:`PlacementRefusedError` when a direct ``action`` (an RPC's name) may
        not place channels here (see the module docstring)."""
        if self._placed_by is not None:
            raise PlacementRefusedError(action, self._placed_by)

    async def assign(self, channel: str) -> OpenResult:
        """Open ``channel`` for writing on this node (fencing its previous owner).

        Calls that overlap share one open; otherwise each call takes the channel over
        anew (see the module docstring). Raises what ``open_wal`` raises:
        ``ChannelFencedError`` if a newer owner exists, ``CancelledError`` if cancelled.
        """
        self._check_open()
        validate_channel_name(channel)
        lock = self._locks.setdefault(channel, asyncio.Lock())
        generation = self._opens.get(channel, 0)
        async with lock:
            self._check_open()
            current = self._wals.get(channel)
            opened_meanwhile = self._opens.get(channel, 0) != generation
            if current is not None and not current.is_fenced and opened_meanwhile:
                return OpenResult(current, newly_opened=False)
            if current is not None and current.is_fenced:
                await self._drop(channel, fenced=True)
            allocator = self._allocator_factory()
            try:
                wal = await self._open_wal(
                    self._opener, channel, allocator, self._node_id, self._config
                )
            except ChannelFencedError:
                await allocator.close()
                if channel in self._wals:  # a newer owner exists: our previous WAL is stale
                    await self._drop(channel, fenced=True)
                raise
            except BaseException:
                await allocator.close()
                raise
            previous = self._wals.get(channel)
            previous_allocator = self._allocators.get(channel)
            self._wals[channel] = wal
            self._allocators[channel] = allocator
            self._opens[channel] = self._opens.get(channel, 0) + 1
            if previous is None:  # a replaced WAL is the same holding
                metric_scope.opened(channel)
            if previous is not None:
                await previous.close()
            if previous_allocator is not None:
                await previous_allocator.close()
            return OpenResult(wal, newly_opened=True)

    async def get(self, channel: str) -> WAL:
        """The WAL of ``channel``; ``ChannelNotFoundError`` if not here,
        ``ChannelFencedError`` (and the channel is dropped) if another node took it."""
        self._check_open()
        wal = self._wals.get(channel)
        if wal is None:
            validate_channel_name(channel)  # a name no channel can have is bad input
            raise ChannelNotFoundError(channel)
        if wal.is_fenced:
            await self.report_fenced(channel)
            raise ChannelFencedError(channel, "another node took this channel over")
        return wal

    async def report_fenced(self, channel: str) -> None:
        """Drop a channel whose WAL was fenced (called when an append found out).

        Only the WAL this node now has for the channel counts: an append that failed
        on a WAL this node has since replaced drops nothing.
        """
        wal = self._wals.get(channel)
        if wal is not None and wal.is_fenced:
            await self._drop(channel, fenced=True)

    async def remove(self, channel: str) -> None:
        self._check_open()
        if channel not in self._wals:
            validate_channel_name(channel)
            raise ChannelNotFoundError(channel)
        async with self._locks.setdefault(channel, asyncio.Lock()):
            await self._drop(channel, fenced=False)

    def channels(self) -> list[WAL]:
        return list(self._wals.values())

    def take_fenced(self) -> list[str]:
        fenced, self._fenced = self._fenced, []
        return fenced

    async def _drop(self, channel: str, *, fenced: bool) -> None:
        wal = self._wals.pop(channel, None)
        allocator = self._allocators.pop(channel, None)
        if fenced:
            self._fenced.append(channel)
            _log.warning("channel %s was fenced by another node; dropped", channel)
        if wal is not None:
            await wal.close()
            metric_scope.given_up(channel)
        if allocator is not None:
            await allocator.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the node is shutting down")

    async def close(self) -> None:
        """Close every WAL (each waits for its in-flight appends); idempotent."""
        if self._closed:
            return
        self._closed = True
        channels = list(self._wals)
        await asyncio.gather(
            self.read_only.close(),
            *(self._drop(channel, fenced=False) for channel in channels),
            return_exceptions=True,
        )
