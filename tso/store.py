"""What the election and the oracle need from a coordination store (etcd, in production).

Every method either completes or raises a typed error: :class:`UnavailableError` when
the store did not answer within ``timeout`` seconds (transient failures are retried
until then), :class:`NotLeaderError` when a guarded write finds another leader,
:class:`TimestampRegressionError` when a guarded write would not grow the saved value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from streamwal.errors import DecodeError, NotLeaderError, TimestampRegressionError

__all__ = [
    "CoordinationStore",
    "LeaderRecord",
    "WindowRefusal",
    "WindowSave",
    "decode_window",
    "encode_window",
    "not_leader",
    "window_regression",
]

_WINDOW_DIGITS = 20  # uint64 fits; fixed width so etcd's byte-wise compare orders numbers


def encode_window(physical_ms: int) -> bytes:
    """The stored form of a saved window: fixed-width decimal, so bytes order like numbers."""
    if not 0 <= physical_ms < 10**_WINDOW_DIGITS:
        raise ValueError(f"window out of range: {physical_ms}")
    return str(physical_ms).rjust(_WINDOW_DIGITS, "0").encode("ascii")


def decode_window(raw: bytes) -> int:
    """Inverse of :func:`encode_window`; raises :class:`DecodeError` on anything else."""
    if len(raw) != _WINDOW_DIGITS or not raw.isdigit():
        raise DecodeError(f"saved TSO window is not a {_WINDOW_DIGITS}-digit number: {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class LeaderRecord:
    """The leader key's value: a per-process identity and the address followers redirect to."""

    id: str
    address: str = ""

    def encode(self) -> bytes:
        return json.dumps({"id": self.id, "address": self.address}, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LeaderRecord:
        """Raises :class:`DecodeError` when ``raw`` was not written by :meth:`encode`."""
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or not isinstance(data.get("id"), str):
                raise ValueError("no id")
            address = data.get("address") or ""
            if not isinstance(address, str):
                raise ValueError("address is not a string")
        except ValueError as exc:
            raise DecodeError(f"TSO leader key holds a foreign value: {raw!r}") from exc
        return cls(id=data["id"], address=address)


def not_leader(leader_now: bytes | None) -> NotLeaderError:
    """A window save's refusal when ``leader_now`` holds the leader key: every store
    names the current leader's address the same way (none for a foreign record)."""
    if leader_now is None:
        return NotLeaderError(None)
    try:
        return NotLeaderError(LeaderRecord.decode(leader_now).address or None)
    except DecodeError:
        return NotLeaderError(None)


def window_regression(stored: bytes | None, window_ms: int) -> TimestampRegressionError:
    """A window save's refusal when the saved window ``stored`` is not below the new one."""
    return TimestampRegressionError(
        f"saved TSO window {stored!r} is not below the new window {window_ms}"
    )


@dataclass(frozen=True)
class WindowSave:
    """One fenced window save, as :meth:`CoordinationStore.save_window` hands it to a
    store's :meth:`~CoordinationStore._put_window`."""

    key: str
    #: the new window, encoded (:func:`encode_window`)
    window: bytes
    #: the save expects no window yet (``previous_ms`` is ``None``), not a smaller one
    first: bool
    leader_key: str
    leader_value: bytes


WindowRefusal = tuple[bytes | None, bytes | None]
"""What a refused window save found: the leader key's value and the saved window
(each ``None`` when absent)."""


class CoordinationStore(Protocol):
    """A linearizable key-value store with leases (etcd's v3 API, reduced to what TSO uses).

    ``timeout`` (seconds) bounds the whole call including retries; ``None`` means the
    store's default bound. A store subclasses it for :meth:`save_window`, so every
    store tells a refused save's causes apart the same way; it implements
    :meth:`_put_window`, the fenced write itself.
    """

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def get(self, key: str, *, timeout: float | None = None) -> bytes | None: ...

    async def grant_lease(self, ttl_s: int, *, timeout: float | None = None) -> tuple[int, int]:
        """``(lease id, granted TTL)``; the lease expires that long after its last refresh.

        The store may grant more than ``ttl_s`` (etcd has a minimum).
        """
        ...

    async def refresh_lease(self, lease_id: int, *, timeout: float | None = None) -> int:
        """The lease's renewed TTL in seconds; ``0`` when the lease is gone (expired, revoked)."""
        ...

    async def revoke_lease(self, lease_id: int, *, timeout: float | None = None) -> None:
        """Revoke the lease and delete its keys; a lease already gone is not an error."""
        ...

    async def create_if_absent(
        self, key: str, value: bytes, lease_id: int, *, timeout: float | None = None
    ) -> tuple[bool, bytes | None]:
        """Put ``key`` bound to the lease only if it does not exist.

        Returns ``(created, current value)``; a retried request that had been applied
        (same value, same lease) counts as created.
        """
        ...

    async def delete_if_value(
        self, key: str, value: bytes, *, timeout: float | None = None
    ) -> bool:
        """Delete ``key`` only while it holds ``value``; ``True`` if it was deleted."""
        ...

    async def revoke_if_value(
        self, key: str, value: bytes, *, timeout: float | None = None
    ) -> bool:
        """Revoke the lease ``key`` is bound to while ``key`` holds ``value`` (the key and
        every other key on that lease go); ``True`` if it did."""
        ...

    async def save_window(
        self,
        key: str,
        window_ms: int,
        *,
        previous_ms: int | None,
        leader_key: str,
        leader_value: bytes,
        timeout: float | None = None,
    ) -> None:
        """Persist ``window_ms`` in one transaction fenced by the leader key.

        Applies only if ``leader_key`` still holds ``leader_value`` and the stored
        window is below ``window_ms`` (or, when ``previous_ms`` is ``None``, absent).
        Raises :class:`NotLeaderError` (naming the current leader's address when known)
        if the fence fails, :class:`TimestampRegressionError` if the stored window is
        not below ``window_ms``.
        """
        save = WindowSave(
            key, encode_window(window_ms), previous_ms is None, leader_key, leader_value
        )
        refused = await self._put_window(save, timeout)
        if refused is None:
            return
        leader_now, stored = refused
        if leader_now != leader_value:
            raise not_leader(leader_now)
        raise window_regression(stored, window_ms)

    async def _put_window(self, save: WindowSave, timeout: float | None) -> WindowRefusal | None:
        """Write ``save.window`` at ``save.key`` in one step, only while the leader key
        holds ``save.leader_value`` and the saved window is below the new one (absent,
        for a ``first`` save); ``None`` when written, else what the fence found."""
        ...
