"""A node's session: its record under ``nodes/<id>`` on a lease it keeps alive.

The lease is the node's liveness for everyone else: killed, partitioned or hung, the
node stops renewing and etcd drops its record after the TTL. A clean stop revokes it,
so the node is gone at once. A node id held by another lease is waited for, one TTL
and a second at most: a node restarted right after a crash finds its previous
lease still running out; one still held then belongs to a live node and is refused
(:class:`DuplicateNodeError`). If the lease is lost while the process lives (etcd cut
off for longer than the TTL), the session registers again on a new lease once etcd
answers; meanwhile the balancer may have moved the node's channels, and the fence
keeps this node from writing to them (docs/deploy.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from streamwal.backoff import Backoff
from streamwal.cluster.records import ClusterKeys, NodeRecord, decode, encode
from streamwal.cluster.store import ClusterStore
from streamwal.errors import ClosedError, DecodeError, DuplicateNodeError, UnavailableError
from streamwal.retry import Retry, RetryAttempt, retry_call
from streamwal.tasks import cancel_and_wait

__all__ = ["Session"]

_log = logging.getLogger(__name__)
#: the wait between two registrations refused as a duplicate
_REGISTER_PAUSE = Backoff(initial=0.5, maximum=0.5)


class Session:
    """``start()`` registers (or raises), ``close()`` revokes; ``lease_id`` and
    :attr:`alive` say what a fenced write may rely on."""

    def __init__(
        self, store: ClusterStore, keys: ClusterKeys, record: NodeRecord, ttl_s: int
    ) -> None:
        self._store = store
        self._keys = keys
        self.record = record
        #: the record etcd holds, as far as this session knows (``None``: not written yet)
        self.published: NodeRecord | None = None
        self._ttl = ttl_s
        self._value = encode(record)
        self._lease: int | None = None
        self._expiry = 0.0
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def lease_id(self) -> int | None:
        return self._lease if self.alive else None

    @property
    def alive(self) -> bool:
        """The lease was renewed within its TTL, measured from the renewal's start, so
        this view ends no later than etcd's."""
        return self._lease is not None and time.monotonic() < self._expiry

    async def start(self) -> None:
        if self._closed:
            raise ClosedError("session is closed")
        deadline = time.monotonic() + self._ttl + 1.0

        def waiting(attempt: RetryAttempt) -> None:
            if attempt.attempt == 1:  # once: the retries every half second say nothing new
                _log.info(
                    "cluster: %s; waiting for its lease to run out (up to %.0fs)",
                    attempt.error,
                    deadline - time.monotonic(),
                )

        # another session's record, while its lease lives: each try a new lease
        retry = Retry(
            _REGISTER_PAUSE,
            retry_if=lambda e: isinstance(e, DuplicateNodeError) and time.monotonic() <= deadline,
            on_retry=waiting,
        )
        await retry_call(self._register, retry)
        self._task = asyncio.create_task(self._keep_alive(), name="cluster-session")

    async def _register(self) -> None:
        started = time.monotonic()
        lease, _ttl = await self._store.grant_lease(self._ttl)
        key = self._keys.node(self.record.id)
        try:
            created, current = await self._store.register(
                key, self._value, lease, clear=self._keys.lost + str(self.record.id)
            )
        except BaseException:
            await self._revoke(lease)
            raise
        if not created:
            await self._revoke(lease)
            holder = "unknown"
            if current is not None:
                with contextlib.suppress(DecodeError):
                    holder = decode(NodeRecord, current).address
            raise DuplicateNodeError(self.record.id, holder)
        self._lease, self._expiry = lease, started + self._ttl
        self.published = self.record
        _log.info(
            "cluster: node %d registered (lease %x, ttl %ds)", self.record.id, lease, self._ttl
        )

    async def update(self, record: NodeRecord) -> None:
        """Publish ``record`` (the node's readiness changed) on the current lease; a
        later registration (after a lost lease) writes it too. :attr:`published` says
        what etcd was last told, so a failed put can be tried again."""
        self.record = record
        self._value = encode(record)
        lease = self.lease_id
        if lease is not None:
            await self._store.put(self._keys.node(record.id), self._value, lease=lease)
            self.published = record

    async def _keep_alive(self) -> None:
        interval = self._ttl / 3
        while not self._closed:
            await asyncio.sleep(interval)
            lease = self._lease
            started = time.monotonic()
            try:
                if lease is not None:
                    ttl = await self._store.refresh_lease(lease, timeout=interval)
                    if ttl > 0:
                        self._expiry = started + self._ttl
                        continue
                    _log.warning(
                        "cluster: lease of node %d expired; registering again", self.record.id
                    )
                    self._lease = None
                await self._register()
            except UnavailableError as exc:
                _log.warning(
                    "cluster: etcd unreachable, node %d keeps serving: %s", self.record.id, exc
                )
            except DuplicateNodeError as exc:
                _log.error("cluster: cannot register again: %s", exc)

    async def _revoke(self, lease: int) -> None:
        with contextlib.suppress(UnavailableError, ClosedError):
            await self._store.revoke_lease(lease, timeout=2.0)

    async def close(self) -> None:
        """Stop renewing and revoke: the node's record (and a balancer term it holds)
        goes at once. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(self._task)
        lease, self._lease = self._lease, None
        if lease is not None:
            await self._revoke(lease)
