"""Running the oracle inside the node: the single-node default."""

from __future__ import annotations

import logging
from typing import Final

from streamwal.errors import ClosedError, UnavailableError
from streamwal.lifecycle import Startable
from streamwal.tso.allocator import LocalAllocator
from streamwal.tso.clock import Clock
from streamwal.tso.config import TsoConfig
from streamwal.tso.oracle import TimestampOracle
from streamwal.tso.store import CoordinationStore

__all__ = ["InProcessTSO", "OracleSource"]

_log = logging.getLogger(__name__)


class OracleSource:
    """A :class:`~streamwal.tso.allocator.TimestampSource` on an oracle in this process.

    When the oracle is between terms (campaigning, etcd briefly away) a fetch waits for
    it to serve, at most ``wait_s`` (default: the oracle's unavailable bound), then
    raises :class:`UnavailableError`; if another node leads it raises
    :class:`NotLeaderError` at once. It does not own the oracle.
    """

    def __init__(self, oracle: TimestampOracle, *, wait_s: float | None = None) -> None:
        self._oracle = oracle
        self._wait_s = wait_s

    async def fetch(self, count: int) -> int:
        try:
            return await self._oracle.generate(count)
        except UnavailableError:
            await self._oracle.wait_serving(self._wait_s, fail_if_follower=True)
            return await self._oracle.generate(count)

    async def close(self) -> None:
        """Nothing to release: the oracle belongs to whoever built it."""


class InProcessTSO(Startable):
    """An oracle started in this process plus allocators on it.

    ``async with InProcessTSO(config) as tso:`` campaigns and waits (at most
    ``config.unavailable_after_s``, or ``leader_wait_s``) until this node serves,
    raising :class:`UnavailableError` or :class:`NotLeaderError` if it does not; then
    ``streamwal.tso.allocator()`` gives a :class:`LocalAllocator`. Closing closes the
    allocators it gave out, then the oracle (which resigns).
    """

    def __init__(
        self,
        config: TsoConfig,
        *,
        address: str = "",
        store: CoordinationStore | None = None,
        clock: Clock | None = None,
        leader_wait_s: float | None = None,
    ) -> None:
        self._config = config
        self.oracle: Final = TimestampOracle(config, address=address, store=store, clock=clock)
        self.source: Final = OracleSource(self.oracle)
        self._leader_wait_s = leader_wait_s
        self._allocators: list[LocalAllocator] = []
        self._closed = False

    async def start(self) -> None:
        """Start the oracle and wait until it serves; on failure everything is closed."""
        if self._closed:
            raise ClosedError("in-process TSO is closed")
        try:
            await self.oracle.start()
            await self.oracle.wait_serving(self._leader_wait_s)
        except BaseException:
            await self.close()
            raise

    def allocator(self, batch_size: int | None = None) -> LocalAllocator:
        """A new allocator on this oracle (``batch_size`` defaults to the config's)."""
        if self._closed:
            raise ClosedError("in-process TSO is closed")
        allocator = LocalAllocator(
            self.source, self._config.batch_size if batch_size is None else batch_size
        )
        self._allocators.append(allocator)
        return allocator

    async def close(self) -> None:
        """Close the allocators, then the oracle; idempotent."""
        if self._closed:
            return
        self._closed = True
        allocators, self._allocators = self._allocators, []
        for allocator in allocators:
            await allocator.close()
        await self.oracle.close()
