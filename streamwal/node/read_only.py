"""Read-only reads on a node: any channel, owned here or not (``ConsumeRequest.read_only``).

A node serves them from a read-only handle of the channel
(:func:`~streamwal.wal.initializing.open_read_only`), never from the WAL it may own:
an owner's scanners end when the channel moves away or is fenced, and a read-only read
must go on through takeovers, whoever owns the channel before, during and after. The
handle takes no part in ownership: no producer, no fence, no durable subscription (the
backend's readers; on Pulsar non-durable cursors that hold no ledger back), so reading
never disturbs the owner. Its scanners read the log as the owner's do (same decoding,
same transaction assembly, same order guard), so a reader sees the ids and the order
the owner's readers see.

One handle per channel per node, shared by every read-only reader of the channel on
this node, opened by the first and closed when the last one goes. A channel that does
not exist is :class:`~streamwal.errors.NoSuchChannelError` (NOT_FOUND), asked of the
backend first where it can say (:class:`~streamwal.wal.backend.ChannelDirectory`): a
reader alone would create the topic on a broker that auto-creates them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from streamwal.node.shutdown import ClosesOnce
from streamwal.wal.backend import BackendOpener, ChannelDirectory, DeliveryPolicy
from streamwal.wal.config import WALConfig
from streamwal.wal.initializing import open_read_only
from streamwal.wal.scanner import Scanner
from streamwal.wal.wal import ReadOnlyWAL

__all__ = ["ReadOnlyChannels"]

_log = logging.getLogger(__name__)


@dataclass
class _Handle:
    #: the open, shared by every reader that came while it ran (and its error)
    opening: asyncio.Future[ReadOnlyWAL]
    readers: int = 0


class ReadOnlyChannels(ClosesOnce):
    """The read-only handles of one node; every method is safe to call concurrently.

    No I/O in the constructor; :meth:`close` (idempotent) closes every handle, which
    ends their scanners with :class:`~streamwal.errors.ClosedError`, and refuses new
    reads from then on.
    """

    def __init__(self, opener: BackendOpener, config: WALConfig) -> None:
        self._opener = opener
        self._config = config
        self._handles: dict[str, _Handle] = {}

    @property
    def open_channels(self) -> list[str]:
        """The channels with a handle open now (one reader or more)."""
        return sorted(self._handles)

    def readers(self, channel: str) -> int:
        """How many readers share the handle of ``channel`` (0: none open)."""
        handle = self._handles.get(channel)
        return handle.readers if handle is not None else 0

    @contextlib.asynccontextmanager
    async def read(
        self, channel: str, policy: DeliveryPolicy, vchannel: str | None = None
    ) -> AsyncIterator[Scanner]:
        """A started scanner of ``channel`` from ``policy`` for the block, on the
        channel's shared handle; the scanner is closed when the block ends, and the
        handle with it if this was its last reader.

        Raises what :meth:`~streamwal.wal.wal.ReadOnlyWAL.read` raises (an unknown id:
        ``InvalidInputError``; a truncated position: ``TruncatedError``), and
        :class:`~streamwal.errors.NoSuchChannelError` for a channel that does not exist.
        """
        handle, wal = await self._acquire(channel)
        try:
            scanner = await wal.read(policy, vchannel)
            try:
                yield scanner
            finally:
                await scanner.close()
        finally:
            await self._release(channel, handle)

    async def _acquire(self, channel: str) -> tuple[_Handle, ReadOnlyWAL]:
        """The channel's handle with one more reader, counted before any wait so that a
        reader leaving meanwhile cannot close it under this one."""
        self._check_open()
        handle = self._handles.get(channel)
        if handle is None:
            opening = asyncio.ensure_future(self._open(channel))
            handle = self._handles[channel] = _Handle(opening)
        handle.readers += 1
        try:
            wal = await asyncio.shield(handle.opening)
        except BaseException:
            await self._release(channel, handle)
            raise
        return handle, wal

    async def _open(self, channel: str) -> ReadOnlyWAL:
        if isinstance(self._opener, ChannelDirectory):
            await self._opener.require_channel(channel)
        wal = await open_read_only(self._opener, channel, self._config)
        _log.info("channel %s: read-only handle opened", channel)
        return wal

    async def _release(self, channel: str, handle: _Handle) -> None:
        handle.readers -= 1
        if handle.readers > 0:
            return
        if self._handles.get(channel) is handle:
            del self._handles[channel]  # a reader from now on opens a handle of its own
        await _close_handle(handle)

    async def close(self) -> None:
        """Close every handle (their readers end); idempotent."""
        if not self._close_once():
            return
        handles, self._handles = list(self._handles.values()), {}
        await asyncio.gather(*(_close_handle(h) for h in handles), return_exceptions=True)


async def _close_handle(handle: _Handle) -> None:
    """Close the handle's WAL once its open is over (a failed open left nothing)."""
    try:
        wal = await asyncio.shield(handle.opening)
    except Exception:
        return
    await wal.close()
    _log.info("channel %s: read-only handle closed", wal.channel)
