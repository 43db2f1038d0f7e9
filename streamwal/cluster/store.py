"""The cluster's etcd access: the TSO's store (its thread pool, retries, typed errors)
plus the reads and guarded transactions the cluster needs.

The client is still the blocking ``python3-etcd3`` behind a thread pool, not
``aetcd``: the cluster reads its state by polling one prefix (see
:mod:`streamwal.cluster.follower` for why), so it needs no watch stream, and one
client keeps one set of TLS, auth and reconnect settings for the whole node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from etcd3.utils import prefix_range_end

from streamwal.errors import DeposedError, InvalidInputError
from streamwal.tso.etcd_store import EtcdStore

if TYPE_CHECKING:
    from streamwal.tso.config import EtcdConfig

__all__ = ["ClusterStore", "Entry", "LeaseTTL"]


@dataclass(frozen=True)
class Entry:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True)
class LeaseTTL:
    """etcd's answer for one lease: the TTL it was granted and what is left of it,
    both in whole seconds (etcd counts no finer)."""

    granted_s: int
    remaining_s: int


class ClusterStore(EtcdStore):
    """:class:`EtcdStore` with prefix reads and the balancer's fenced writes."""

    @classmethod
    def from_settings(cls, etcd: EtcdConfig, *, unavailable_after_s: float = 2.0) -> ClusterStore:
        """A store on a node file's ``etcd:`` section. A short bound per call: a node
        that cannot reach etcd keeps serving and tries again on its next step."""
        return cls.from_etcd(etcd, request_timeout_s=1.0, unavailable_after_s=unavailable_after_s)

    async def __aenter__(self) -> ClusterStore:
        await self.start()
        return self

    async def read_prefix(
        self, prefix: str, *, timeout: float | None = None
    ) -> tuple[int, list[Entry]]:
        """Every key under ``prefix`` at one revision, and that revision."""

        def op(client: Any) -> tuple[int, list[Entry]]:
            entries: list[Entry] = []
            revision = 0
            for value, meta in client.get_prefix(prefix):
                revision = max(revision, int(meta.response_header.revision))
                entries.append(
                    Entry(
                        meta.key.decode(),
                        bytes(value),
                        int(meta.create_revision),
                        int(meta.mod_revision),
                        int(meta.lease_id),
                    )
                )
            return revision, entries

        return await self._call("read prefix", op, timeout)

    async def put(
        self, key: str, value: bytes, *, lease: int | None = None, timeout: float | None = None
    ) -> None:
        def op(client: Any) -> None:
            client.put(key, value, lease=lease)

        await self._call("put", op, timeout)

    async def delete_tree(self, prefix: str, *, timeout: float | None = None) -> int:
        """Delete every key under ``prefix`` in one request; how many there were. The
        count is etcd's own, so an operator is told what went, not what was read
        before (a node may have written meanwhile)."""
        if not prefix.strip("/"):
            raise InvalidInputError(f"prefix: refusing to delete a root prefix: {prefix!r}")

        def op(client: Any) -> int:
            return int(client.delete_prefix(prefix).deleted)

        return await self._call("delete prefix", op, timeout)

    async def delete_keys(self, keys: Sequence[str], *, timeout: float | None = None) -> int:
        """Delete each of ``keys`` (exactly: not what lies under them) in one
        transaction; how many there were."""
        if not keys:
            return 0

        def op(client: Any) -> int:
            deletes = [client.transactions.delete(key) for key in keys]
            _ok, responses = client.transaction(compare=[], success=deletes, failure=[])
            return sum(int(r.response_delete_range.deleted) for r in responses)

        return await self._call("delete keys", op, timeout)

    async def delete_tree_unless(
        self, prefix: str, guard: str, *, timeout: float | None = None
    ) -> int | None:
        """Delete every key under ``prefix`` in one transaction that holds only while no
        key exists under ``guard``; how many went, or ``None`` (nothing deleted) when
        one does. A check read before the delete would let a key written in between be
        deleted with the rest."""
        if not prefix.strip("/"):
            raise InvalidInputError(f"prefix: refusing to delete a root prefix: {prefix!r}")

        def op(client: Any) -> int | None:
            txn = client.transactions
            # a range compare holds for every key in it, and for none: etcd compares a
            # missing key as version 0, so "no key under guard" is version == 0
            absent = txn.version(guard, range_end=prefix_range_end(guard.encode())) == 0
            delete = txn.delete(prefix, range_end=prefix_range_end(prefix.encode()))
            ok, responses = client.transaction(compare=[absent], success=[delete], failure=[])
            return int(responses[0].response_delete_range.deleted) if ok else None

        return await self._call("delete prefix", op, timeout)

    async def lease_ttls(
        self, lease_ids: Iterable[int], *, timeout: float | None = None
    ) -> dict[int, LeaseTTL | None]:
        """Each lease's granted and remaining TTL (etcd's LeaseTimeToLive); ``None`` for
        a lease that expired or was revoked. One call for all of them: ``cluster
        status`` asks for every node at one moment."""
        ids = list(lease_ids)

        def op(client: Any) -> dict[int, LeaseTTL | None]:
            answers: dict[int, LeaseTTL | None] = {}
            for lease_id in ids:
                try:
                    info = client.get_lease_info(lease_id)
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                    answers[lease_id] = None
                    continue
                remaining = int(info.TTL)
                answers[lease_id] = (
                    None if remaining < 0 else LeaseTTL(int(info.grantedTTL), remaining)
                )
            return answers

        return await self._call("lease time-to-live", op, timeout)

    async def declare_lost(
        self,
        node_key: str,
        node_revision: int,
        lost_key: str,
        value: bytes,
        lease: int,
        *,
        timeout: float | None = None,
    ) -> bool:
        """Write ``lost_key`` only while ``node_key`` is still at ``node_revision`` (the
        record that was probed, not a restarted node's), then revoke ``lease``;
        ``False`` when the record changed (nothing written, nothing revoked)."""

        def op(client: Any) -> bool:
            txn = client.transactions
            ok, _ = client.transaction(
                compare=[txn.mod(node_key) == node_revision],
                success=[txn.put(lost_key, value)],
                failure=[],
            )
            return bool(ok)

        if not await self._call("declare lost", op, timeout):
            return False
        await self.revoke_lease(lease, timeout=timeout)
        return True

    async def register(
        self, key: str, value: bytes, lease: int, *, clear: str, timeout: float | None = None
    ) -> tuple[bool, bytes | None]:
        """Create ``key`` on ``lease`` unless it exists, deleting ``clear`` in the same
        transaction (a node's registration clears the word that it was lost: a later
        absence of this start must wait out the grace again); ``(created, current
        value)``."""

        def op(client: Any) -> tuple[bool, bytes | None]:
            txn = client.transactions
            ok, responses = client.transaction(
                compare=[txn.create(key) == 0],
                success=[txn.put(key, value, lease=lease), txn.delete(clear)],
                failure=[txn.get(key)],
            )
            if ok:
                return True, None
            kvs = responses[0] if responses else []
            return False, (bytes(kvs[0][0]) if kvs else None)

        return await self._call("register", op, timeout)

    async def campaign(
        self, key: str, value: bytes, lease: int, *, timeout: float | None = None
    ) -> int | None:
        """Create ``key`` on ``lease`` unless it exists; the term (its create revision)
        if this lease holds it now, else ``None``."""

        def op(client: Any) -> int | None:
            txn = client.transactions
            client.transaction(
                compare=[txn.create(key) == 0],
                success=[txn.put(key, value, lease=lease)],
                failure=[],
            )
            _value, meta = client.get(key)
            if meta is None or int(meta.lease_id) != lease:
                return None
            return int(meta.create_revision)

        return await self._call("campaign", op, timeout)

    async def create_all_if_absent(
        self, flag: str, entries: Mapping[str, bytes], *, timeout: float | None = None
    ) -> bool:
        """Write ``flag`` and ``entries`` in one transaction, only if ``flag`` is absent."""

        def op(client: Any) -> bool:
            txn = client.transactions
            puts = [txn.put(flag, b"1")] + [txn.put(k, v) for k, v in entries.items()]
            ok, _ = client.transaction(compare=[txn.create(flag) == 0], success=puts, failure=[])
            return bool(ok)

        return await self._call("seed", op, timeout)

    async def fenced_write(
        self,
        term_key: str,
        term: int,
        *,
        expect: Mapping[str, int],
        puts: Sequence[tuple[str, bytes]],
        deletes: Sequence[str] = (),
        timeout: float | None = None,
    ) -> bool:
        """Apply ``puts`` and ``deletes`` only while ``term`` holds ``term_key`` and every
        key of ``expect`` is still at its mod revision (0: absent).

        ``False`` when a key changed meanwhile (re-read and plan again); raises
        :class:`DeposedError` when the term is over: a deposed balancer writes nothing.
        """

        def op(client: Any) -> tuple[bool, int]:
            txn = client.transactions
            compare = [txn.create(term_key) == term]
            compare += [txn.mod(k) == rev for k, rev in expect.items()]
            success = [txn.put(k, v) for k, v in puts] + [txn.delete(k) for k in deletes]
            ok, responses = client.transaction(
                compare=compare, success=success, failure=[txn.get(term_key)]
            )
            if ok:
                return True, term
            kvs = responses[0] if responses else []
            held = int(kvs[0][1].create_revision) if kvs else 0
            return False, held

        ok, held = await self._call("fenced write", op, timeout)
        if not ok and held != term:
            raise DeposedError(term)
        return ok
