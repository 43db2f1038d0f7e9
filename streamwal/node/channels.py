"""The channels this node owns: open (take over), look up, drop, close.

Opening is serialized per channel, so two ``AssignChannel`` calls for one channel
that overlap share one open. A later call takes the channel over again: a WAL that was
fenced while quiet does not know it (only an append tells), so answering from it would
leave the caller believing this node owns the channel. The new WAL is opened before
the old one is closed: its producer fences the old one on the broker, so closing the
old one sends the broker nothing. (A client closing a producer while another
producer's creation fences it can deadlock a Pulsar 4.0.7 broker.) A channel given up
here stops showing in ``/metrics`` (:mod:`streamwal.node.metric_scope`).

Fenced is forever: a WAL found fenced (another node took the channel) is closed, but
the channel stays here as fenced (:class:`FencedChannel`), so every later call on it
says so (:class:`~streamwal.errors.ChannelFencedError`), not that it was never here,
until :meth:`ChannelManager.remove` drops it or a new open takes it back. Each is
reported once in ``ListChannels``' list of channels fenced since the last listing.

Terms (:mod:`streamwal.node.terms`): every open carries the channel's term. With a
term store (a standalone node's, in etcd) the open claims it there first; without one
(a cluster, which hands terms out itself) the node refuses only a term below the one
it holds the channel under, live or fenced.

Who places channels: by default whoever calls ``AssignChannel``/``RemoveChannel``.
A layer that places them itself (a cluster) says so with :meth:`ChannelManager.place_by`,
and the node refuses those calls from then on, naming the supported way; the layer
keeps calling :meth:`ChannelManager.assign` and :meth:`ChannelManager.remove`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from streamwal.errors import (
    ChannelFencedError,
    ChannelNotFoundError,
    PlacementRefusedError,
    StaleTermError,
    UnavailableError,
)
from streamwal.node import metric_scope
from streamwal.node.read_only import ReadOnlyChannels
from streamwal.node.shutdown import ClosesOnce
from streamwal.node.terms import ChannelTerm, ChannelTerms, check_term, next_term
from streamwal.tso import LocalAllocator
from streamwal.wal.backend import BackendOpener, validate_channel_name
from streamwal.wal.config import WALConfig
from streamwal.wal.initializing import open_wal
from streamwal.wal.wal import WAL

__all__ = ["ChannelManager", "FencedChannel", "OpenResult"]

_log = logging.getLogger(__name__)
#: what every refusal on a channel fenced here says
_TAKEN_OVER = "another node took this channel over"


@dataclass(frozen=True)
class OpenResult:
    wal: WAL
    newly_opened: bool


@dataclass(frozen=True)
class FencedChannel:
    """A channel another node took from this one: kept until removed (see the module)."""

    channel: str
    term: int
    first_time_tick: int
    reason: str

    def error(self) -> ChannelFencedError:
        return ChannelFencedError(self.channel, self.reason)


class ChannelManager(ClosesOnce):
    """Owns the WALs of this node; every method is safe to call concurrently."""

    def __init__(
        self,
        opener: BackendOpener,
        allocator_factory: Callable[[], LocalAllocator],
        node_id: int,
        config: WALConfig,
        open_wal_fn: Callable[..., Coroutine[Any, Any, WAL]] = open_wal,
        *,
        terms: ChannelTerms | None = None,
    ) -> None:
        """``terms``: where channels' terms are claimed (``None``: the node checks only
        the terms it holds itself; see the module docstring)."""
        self._opener = opener
        self._allocator_factory = allocator_factory
        self._node_id = node_id
        self._config = config
        self._open_wal = open_wal_fn
        self._wals: dict[str, WAL] = {}
        self._allocators: dict[str, LocalAllocator] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._opens: dict[str, int] = {}  # successful opens per channel
        self._terms = terms
        #: channels fenced here, kept until removed
        self._fenced_here: dict[str, FencedChannel] = {}
        #: channels fenced since the last listing
        self._fenced: list[str] = []
        self._placed_by: str | None = None
        self._log_format_gate: Callable[[], Awaitable[str]] | None = None
        self.read_only = ReadOnlyChannels(opener, config)
        """Read-only handles of any channel, owned here or not (``ConsumeRequest.read_only``)."""

    @property
    def node_id(self) -> int:
        return self._node_id

    def gate_log_format(self, gate: Callable[[], Awaitable[str]]) -> None:
        """Ask ``gate`` at each open which log format to write (``"v1"``/``"v2"``): a
        cluster member writes v2 only once every node reads it. Without a gate, the
        ``wal.log_format`` setting decides."""
        self._log_format_gate = gate

    def place_by(self, how: str) -> None:
        """Channels here are placed by another layer from now on; ``how`` tells an
        operator the supported way to move one (the refusal of a direct call says it)."""
        self._placed_by = how

    def check_direct_placement(self, action: str) -> None:
        """:class:`PlacementRefusedError` when a direct ``action`` (an RPC's name) may
        not place channels here (see the module docstring)."""
        if self._placed_by is not None:
            raise PlacementRefusedError(action, self._placed_by)

    async def assign(self, channel: str, term: int | None = None) -> OpenResult:
        """Open ``channel`` for writing on this node (fencing its previous owner), under
        ``term`` (``None``: the channel's current term plus one).

        Calls that overlap share one open; otherwise each call takes the channel over
        anew (see the module docstring). Raises :class:`StaleTermError` for a term a
        newer owner was given (nothing opened), and what ``open_wal`` raises:
        ``ChannelFencedError`` if a newer owner exists, ``CancelledError`` if cancelled.
        """
        self._check_open()
        validate_channel_name(channel)
        if term is not None:
            check_term(term)
        lock = self._locks.setdefault(channel, asyncio.Lock())
        generation = self._opens.get(channel, 0)
        async with lock:
            self._check_open()
            current = self._wals.get(channel)
            opened_meanwhile = self._opens.get(channel, 0) != generation
            if (
                current is not None
                and not current.is_fenced
                and opened_meanwhile
                and term in (None, current.term)
            ):
                return OpenResult(current, newly_opened=False)
            if current is not None and current.is_fenced:
                await self._drop(channel, fenced=True)
            granted = await self._claim(channel, term)
            gate = self._log_format_gate
            fmt = {} if gate is None else {"log_format": await gate()}
            allocator = self._allocator_factory()
            try:
                wal = await self._open_wal(
                    self._opener,
                    channel,
                    allocator,
                    self._node_id,
                    self._config,
                    term=granted,
                    # after the fence, before anything is written: a newer claim since
                    # ours ends the open there, so no lower term follows a higher one
                    fenced_hook=lambda: self._confirm(channel, granted),
                    **fmt,
                )
            except (ChannelFencedError, StaleTermError):
                await allocator.close()
                if channel in self._wals:  # a newer owner exists: our previous WAL is stale
                    await self._drop(channel, fenced=True)
                raise
            except BaseException:
                await allocator.close()
                raise
            try:
                await self._confirm(channel, granted)
            except BaseException:
                await wal.close()
                await allocator.close()
                if channel in self._wals:  # fenced by the open just made
                    await self._drop(channel, fenced=True)
                raise
            previous = self._wals.get(channel)
            previous_allocator = self._allocators.get(channel)
            self._wals[channel] = wal
            self._allocators[channel] = allocator
            self._fenced_here.pop(channel, None)
            self._opens[channel] = self._opens.get(channel, 0) + 1
            if previous is None:  # a replaced WAL is the same holding
                metric_scope.opened(channel)
            if previous is not None:
                await previous.close()
            if previous_allocator is not None:
                await previous_allocator.close()
            return OpenResult(wal, newly_opened=True)

    async def _claim(self, channel: str, asked: int | None) -> int:
        """The term this open is made under: claimed in the term store, or checked
        against the one this node holds the channel under (see the module)."""
        if self._terms is not None:
            return await self._terms.claim(channel, self._node_id, asked)
        held = self.term_of(channel)
        current = None if held is None else ChannelTerm(channel, held, self._node_id)
        return next_term(channel, current, self._node_id, asked)

    async def _confirm(self, channel: str, term: int) -> None:
        """:class:`StaleTermError` when another node claimed a newer term while this
        open ran: two opens that race both pass their claims, and the one that fences
        last holds the broker; a lower term must not keep writing. The newer owner is
        fenced by then (its next open fences this one): the channel is left to it.
        etcd not answering now leaves the open standing (its claim did succeed)."""
        if self._terms is None:
            return
        try:
            held = await self._terms.read(channel)
        except UnavailableError as exc:
            _log.warning("channel %s: term %d not confirmed after the open: %s", channel, term, exc)
            return
        if held is not None and (
            held.term > term or (held.term == term and held.node != self._node_id)
        ):
            raise StaleTermError(channel, term, held.term, held.node)

    def term_of(self, channel: str) -> int | None:
        """The term this node holds ``channel`` under, live or fenced (``None``: not here)."""
        wal = self._wals.get(channel)
        if wal is not None:
            return wal.term
        fenced = self._fenced_here.get(channel)
        return None if fenced is None else fenced.term

    async def get(self, channel: str) -> WAL:
        """The WAL of ``channel``; ``ChannelNotFoundError`` if not here,
        ``ChannelFencedError`` if another node took it (then and until it is removed)."""
        self._check_open()
        wal = self._wals.get(channel)
        if wal is None:
            fenced = self._fenced_here.get(channel)
            if fenced is not None:
                raise fenced.error()
            validate_channel_name(channel)  # a name no channel can have is bad input
            raise ChannelNotFoundError(channel)
        if wal.is_fenced:
            await self.report_fenced(channel)
            raise ChannelFencedError(channel, _TAKEN_OVER)
        return wal

    async def report_fenced(self, channel: str) -> None:
        """Close the WAL of a channel that was fenced (called when an append found out),
        keeping the channel here as fenced (see the module docstring).

        Only the WAL this node now has for the channel counts: an append that failed
        on a WAL this node has since replaced changes nothing.
        """
        wal = self._wals.get(channel)
        if wal is not None and wal.is_fenced:
            await self._drop(channel, fenced=True)

    async def remove(self, channel: str) -> None:
        """Close ``channel`` here, or forget it if it was fenced here;
        ``ChannelNotFoundError`` if neither."""
        self._check_open()
        if channel not in self._wals and channel not in self._fenced_here:
            validate_channel_name(channel)
            raise ChannelNotFoundError(channel)
        async with self._locks.setdefault(channel, asyncio.Lock()):
            self._fenced_here.pop(channel, None)
            await self._drop(channel, fenced=False)

    def channels(self) -> list[WAL]:
        """The channels this node owns (not those fenced here)."""
        return list(self._wals.values())

    def fenced_channels(self) -> list[FencedChannel]:
        """The channels fenced here and not removed yet."""
        return list(self._fenced_here.values())

    def take_fenced(self) -> list[str]:
        fenced, self._fenced = self._fenced, []
        return fenced

    async def _drop(self, channel: str, *, fenced: bool) -> None:
        wal = self._wals.pop(channel, None)
        allocator = self._allocators.pop(channel, None)
        if fenced:
            self._fenced.append(channel)
            if wal is not None:
                self._fenced_here[channel] = FencedChannel(
                    channel, wal.term, wal.first_time_tick, _TAKEN_OVER
                )
            _log.warning(
                "channel %s was fenced by another node; closed, kept as fenced until removed",
                channel,
            )
        if wal is not None:
            await wal.close()
            metric_scope.given_up(channel)
        if allocator is not None:
            await allocator.close()

    async def close(self) -> None:
        """Close every WAL (each waits for its in-flight appends); idempotent."""
        if not self._close_once():
            return
        channels = list(self._wals)
        await asyncio.gather(
            self.read_only.close(),
            *(self._drop(channel, fenced=False) for channel in channels),
            return_exceptions=True,
        )
