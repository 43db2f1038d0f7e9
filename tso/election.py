"""Leadership of one TSO cluster: an etcd lease plus a create-if-absent leader key.

A node is leader from the moment its create transaction succeeds until its lease
deadline passes without a renewal. The deadline is kept on the monotonic clock and
measured from the *start* of the grant or keepalive request, so the local view of the
lease always ends no later than etcd's. Keepalives go out every third of the TTL;
when one comes back with TTL 0 (revoked or expired in etcd) or none arrives before the
deadline, the node steps down and calls ``on_lost`` at once.

Everything runs on the event loop; ``is_leader`` is a cheap, synchronous check that
callers make before and after handing out a timestamp.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from streamwal.errors import ClosedError, DecodeError, UnavailableError
from streamwal.tso.clock import Clock
from streamwal.tso.store import CoordinationStore, LeaderRecord

__all__ = ["Election"]

_log = logging.getLogger(__name__)
_FOREIGN = "<foreign>"
_ORDERLY = frozenset({"closed", "resigned"})


class Election:
    """One node's campaign for ``leader_key``.

    Not safe to campaign concurrently from two tasks; the oracle's run loop is the only
    caller of :meth:`campaign`. ``on_lost(reason)`` runs synchronously on the event loop
    when leadership is lost without being given up (it is not called by
    :meth:`step_down` or :meth:`resign`).
    """

    def __init__(
        self,
        store: CoordinationStore,
        *,
        leader_key: str,
        record: LeaderRecord,
        lease_ttl_s: int,
        clock: Clock,
        request_timeout_s: float,
        on_lost: Callable[[str], None],
    ) -> None:
        self._store = store
        self._key = leader_key
        self.record: Final = record
        #: what this node writes into the leader key; the fence of every window save
        self.value: Final = record.encode()
        self._ttl = lease_ttl_s
        self._clock = clock
        self._timeout = request_timeout_s
        self._on_lost = on_lost
        self._lease_id: int | None = None
        self._expiry = 0.0
        self._retired: list[int] = []
        self._keepalive_task: asyncio.Task[None] | None = None
        self._dead_tasks: list[asyncio.Task[None]] = []
        self._observed: LeaderRecord | None = None
        self._closed = False

    @property
    def lease_id(self) -> int | None:
        """The lease of the current term, ``None`` when not leader."""
        return self._lease_id

    @property
    def is_leader(self) -> bool:
        """True while a term is held and its lease deadline has not passed."""
        return self._lease_id is not None and self._clock.monotonic() < self._expiry

    @property
    def lease_remaining_s(self) -> float:
        if self._lease_id is None:
            return 0.0
        return max(0.0, self._expiry - self._clock.monotonic())

    @property
    def observed_leader(self) -> LeaderRecord | None:
        """The leader seen by the last campaign (this node when leader); ``None`` if unknown."""
        return self.record if self.is_leader else self._observed

    async def campaign(self) -> bool:
        """Try once to become leader; ``True`` if this node now holds the leader key.

        Raises :class:`UnavailableError` when etcd does not answer (the observed leader
        is then forgotten) and :class:`ClosedError` after :meth:`close`.
        """
        if self._closed:
            raise ClosedError("election is closed")
        if self.is_leader:
            return True
        try:
            return await self._campaign_once()
        except UnavailableError:
            self._observed = None
            raise

    async def _campaign_once(self) -> bool:
        await self._revoke_retired()
        current = await self._store.get(self._key, timeout=self._timeout)
        if current is not None:
            holder = _decode(current)
            if holder.id != self.record.id:
                self._observed = holder
                return False
            # Our own key from an earlier term whose lease has not run out in etcd yet:
            # this node no longer serves, so clear it and campaign afresh.
            await self._store.delete_if_value(self._key, current, timeout=self._timeout)
        start = self._clock.monotonic()
        lease_id, ttl = await self._store.grant_lease(self._ttl, timeout=self._timeout)
        try:
            won, holder_raw = await self._store.create_if_absent(
                self._key, self.value, lease_id, timeout=self._timeout
            )
        except BaseException:
            self._retired.append(lease_id)
            raise
        if not won:
            self._observed = _decode(holder_raw) if holder_raw is not None else None
            self._retired.append(lease_id)
            await self._revoke_retired()
            return False
        self._lease_id = lease_id
        self._expiry = start + ttl
        self._observed = self.record
        self._keepalive_task = asyncio.create_task(
            self._keepalive(lease_id), name=f"tso-keepalive-{lease_id:x}"
        )
        _log.info("became TSO leader of %s (lease %x, ttl %ss)", self._key, lease_id, ttl)
        return True

    async def _revoke_retired(self) -> None:
        while self._retired:
            lease_id = self._retired[0]
            try:
                await self._store.revoke_lease(lease_id, timeout=self._timeout)
            except UnavailableError:
                return  # the lease runs out on its own; try again next campaign
            self._retired.pop(0)

    async def _keepalive(self, lease_id: int) -> None:
        interval = self._ttl / 3.0
        delay = interval
        while self._lease_id == lease_id:
            wait = min(delay, self._expiry - self._clock.monotonic())
            if wait > 0:
                await asyncio.sleep(wait)
            start = self._clock.monotonic()
            if start >= self._expiry:
                self._lose(lease_id, "lease deadline passed without a renewal")
                return
            try:
                ttl = await self._store.refresh_lease(lease_id, timeout=self._expiry - start)
            except UnavailableError as exc:
                _log.warning("TSO lease %x keepalive failed: %s", lease_id, exc)
                delay = min(interval, 0.2)
                continue
            except ClosedError:
                self._lose(lease_id, "store closed")
                return
            if self._lease_id != lease_id:
                return
            if ttl <= 0:
                self._lose(lease_id, "lease revoked or expired in etcd")
                return
            self._expiry = max(self._expiry, start + ttl)
            delay = interval

    def _lose(self, lease_id: int, reason: str) -> None:
        if self._lease_id != lease_id:
            return
        self.step_down(reason)
        self._on_lost(reason)

    def step_down(self, reason: str) -> None:
        """End the current term now (no I/O); the lease is revoked by :meth:`resign`."""
        lease_id, self._lease_id = self._lease_id, None
        self._expiry = 0.0
        self._observed = None
        if lease_id is None:
            return
        level = logging.INFO if reason in _ORDERLY else logging.WARNING
        _log.log(level, "stepped down as TSO leader of %s: %s", self._key, reason)
        self._retired.append(lease_id)
        task, self._keepalive_task = self._keepalive_task, None
        if task is not None:
            if task is not asyncio.current_task():
                task.cancel()
            self._dead_tasks.append(task)

    async def resign(self, *, timeout: float | None = None) -> None:
        """Step down and revoke the lease so another node can take over at once.

        Best effort: if etcd does not answer, the lease runs out on its own.
        """
        self.step_down("resigned")
        await self._reap()
        try:
            await self._revoke_retired_bounded(timeout)
        except (UnavailableError, ClosedError) as exc:
            _log.info("could not revoke the TSO lease (it will expire): %s", exc)

    async def _revoke_retired_bounded(self, timeout: float | None) -> None:
        while self._retired:
            await self._store.revoke_lease(
                self._retired[0], timeout=self._timeout if timeout is None else timeout
            )
            self._retired.pop(0)

    async def _reap(self) -> None:
        tasks = [t for t in self._dead_tasks if t is not asyncio.current_task()]
        self._dead_tasks = []
        if tasks:
            await asyncio.wait(tasks)

    async def close(self) -> None:
        """Resign and refuse further campaigns; idempotent."""
        if self._closed:
            return
        await self.resign()
        self._closed = True


def _decode(raw: bytes) -> LeaderRecord:
    try:
        return LeaderRecord.decode(raw)
    except DecodeError:
        return LeaderRecord(id=_FOREIGN)
