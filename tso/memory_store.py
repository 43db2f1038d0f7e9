"""A coordination store inside one process, with etcd's lease and transaction semantics.

For unit tests and single-process tools: it makes elections and saved windows behave
as on etcd without a server, and can be switched "down" to act like an unreachable
etcd. It is not shared between processes, so it never replaces etcd in a cluster.
"""

from __future__ import annotations

import asyncio
import itertools

from streamwal.errors import ClosedError, UnavailableError
from streamwal.tso.clock import Clock, SystemClock
from streamwal.tso.store import CoordinationStore, WindowRefusal, WindowSave

__all__ = ["MemoryStore"]


class MemoryStore(CoordinationStore):
    """:class:`~streamwal.tso.store.CoordinationStore` in memory; leases expire on ``clock``'s
    monotonic time.

    Set ``available = False`` to make every call fail with :class:`UnavailableError`
    (after yielding once, as a network call would).
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._data: dict[str, tuple[bytes, int]] = {}  # key -> (value, lease id or 0)
        self._leases: dict[int, tuple[float, int]] = {}  # id -> (expiry, ttl)
        self._ids = itertools.count(1)
        self.available = True
        self.saves = 0
        self._closed = False

    async def start(self) -> None:
        if self._closed:
            raise ClosedError("memory store is closed")

    async def close(self) -> None:
        self._closed = True

    async def _enter(self) -> None:
        await asyncio.sleep(0)
        if self._closed:
            raise ClosedError("memory store is closed")
        if not self.available:
            raise UnavailableError("memory store is down")
        now = self._clock.monotonic()
        for lease_id, (expiry, _) in list(self._leases.items()):
            if expiry <= now:
                self._drop_lease(lease_id)

    def _drop_lease(self, lease_id: int) -> None:
        self._leases.pop(lease_id, None)
        for key, (_, owner) in list(self._data.items()):
            if owner == lease_id:
                del self._data[key]

    def expire_lease(self, lease_id: int) -> None:
        """Drop a lease and its keys now, as etcd does when a TTL runs out."""
        self._drop_lease(lease_id)

    def value(self, key: str) -> bytes | None:
        """The current value of ``key`` (test inspection; no simulated outage)."""
        entry = self._data.get(key)
        return entry[0] if entry else None

    async def get(self, key: str, *, timeout: float | None = None) -> bytes | None:
        await self._enter()
        return self.value(key)

    async def grant_lease(self, ttl_s: int, *, timeout: float | None = None) -> tuple[int, int]:
        await self._enter()
        lease_id = next(self._ids)
        self._leases[lease_id] = (self._clock.monotonic() + ttl_s, ttl_s)
        return lease_id, ttl_s

    async def refresh_lease(self, lease_id: int, *, timeout: float | None = None) -> int:
        await self._enter()
        entry = self._leases.get(lease_id)
        if entry is None:
            return 0
        ttl = entry[1]
        self._leases[lease_id] = (self._clock.monotonic() + ttl, ttl)
        return ttl

    async def revoke_lease(self, lease_id: int, *, timeout: float | None = None) -> None:
        await self._enter()
        self._drop_lease(lease_id)

    async def create_if_absent(
        self, key: str, value: bytes, lease_id: int, *, timeout: float | None = None
    ) -> tuple[bool, bytes | None]:
        await self._enter()
        current = self._data.get(key)
        if current is not None:
            return current == (value, lease_id), current[0]
        if lease_id not in self._leases:
            raise UnavailableError(f"lease {lease_id} not found")
        self._data[key] = (value, lease_id)
        return True, value

    async def delete_if_value(
        self, key: str, value: bytes, *, timeout: float | None = None
    ) -> bool:
        await self._enter()
        current = self._data.get(key)
        if current is None or current[0] != value:
            return False
        del self._data[key]
        return True

    async def revoke_if_value(
        self, key: str, value: bytes, *, timeout: float | None = None
    ) -> bool:
        await self._enter()
        current = self._data.get(key)
        if current is None or current[0] != value or not current[1]:
            return False
        self._drop_lease(current[1])
        return True

    async def _put_window(self, save: WindowSave, timeout: float | None) -> WindowRefusal | None:
        await self._enter()
        leader_now, stored = self.value(save.leader_key), self.value(save.key)
        new = save.window
        fence_ok = stored is None if save.first else stored is not None and stored < new
        if leader_now != save.leader_value or not fence_ok:
            return leader_now, stored
        self._data[save.key] = (new, 0)
        self.saves += 1
        return None
