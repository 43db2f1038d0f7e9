"""The coordination store on a real etcd, through the synchronous ``etcd3`` client.

Every etcd call runs on this store's own small thread pool (never on the event
loop), so a stalled etcd cannot starve other users of asyncio's default executor.
Connection failures are retried with backoff until the call's bound passes, then
surface as :class:`UnavailableError`; a call cancelled by its caller stops waiting
at once (the thread finishes on its own, bounded by the per-request timeout).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

import etcd3
import grpc
from etcd3 import exceptions as etcd_exceptions

from streamwal.backoff import Backoff
from streamwal.errors import (
    ClosedError,
    InvalidInputError,
    MisconfiguredError,
    UnavailableError,
)
from streamwal.lifecycle import Startable
from streamwal.retry import Retry
from streamwal.tso.config import EtcdConfig, TsoConfig, parse_endpoint
from streamwal.tso.store import CoordinationStore, WindowRefusal, WindowSave
from streamwal.tso.tls import ClientTLS

__all__ = ["EtcdStore"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

# A restarted etcd must be found again within a second, not after gRPC's default
# reconnect backoff of up to two minutes.
_GRPC_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 2_000),
]
#: the waits between a call's tries, bounded by the call's ``unavailable_after_s``
_RETRY_BACKOFF = Backoff(initial=0.05, maximum=0.5)
# The etcd3 client marks a failed endpoint unusable for this long (its default is 300 s).
_ENDPOINT_RETRY_S = 0.25

_TRANSIENT_ETCD = (
    etcd_exceptions.ConnectionFailedError,
    etcd_exceptions.ConnectionTimeoutError,
    etcd_exceptions.NoServerAvailableError,
    etcd_exceptions.InternalServerError,
)
_TRANSIENT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.CANCELLED,
    }
)


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, _TRANSIENT_ETCD):
        return True
    if isinstance(exc, grpc.RpcError):
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        return code in _TRANSIENT_CODES
    return False


#: what etcd answers a login with a wrong user or password (its ErrGRPCAuthFailed is
#: INVALID_ARGUMENT), or one it refuses outright
_REFUSED_LOGIN = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)


def _is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.NOT_FOUND


class EtcdStore(Startable, CoordinationStore):
    """:class:`~streamwal.tso.store.CoordinationStore` on etcd.

    ``request_timeout_s`` bounds one etcd request; ``unavailable_after_s`` is the
    default bound of a whole call with its retries. After :meth:`close` every method
    raises :class:`ClosedError`.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        request_timeout_s: float = 1.0,
        unavailable_after_s: float = 5.0,
        user: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
    ) -> None:
        self._endpoints = [parse_endpoint(e) for e in endpoints]
        self._user = user
        self._password = password
        # plain text unless a CA is configured (TsoConfig refuses a client cert without one)
        self._tls = (
            ClientTLS(ca_file=ca_file, cert_file=cert_file, key_file=key_file)
            if ca_file is not None
            else None
        )
        self._request_timeout_s = request_timeout_s
        self._unavailable_after_s = unavailable_after_s
        self._client: Any = None
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    @classmethod
    def from_config(cls, config: TsoConfig) -> Self:
        return cls.from_etcd(
            config.etcd,
            request_timeout_s=config.etcd_timeout_s,
            unavailable_after_s=config.unavailable_after_s,
        )

    @classmethod
    def from_etcd(
        cls, etcd: EtcdConfig, *, request_timeout_s: float, unavailable_after_s: float
    ) -> Self:
        """A store on ``etcd``'s endpoints, with its credentials and TLS."""
        return cls(
            etcd.endpoints,
            request_timeout_s=request_timeout_s,
            unavailable_after_s=unavailable_after_s,
            user=etcd.user,
            password=etcd.password,
            ca_file=etcd.tls.ca_file,
            cert_file=etcd.tls.cert_file,
            key_file=etcd.tls.key_file,
        )

    @property
    def endpoints(self) -> list[str]:
        return [f"{host}:{port}" for host, port in self._endpoints]

    async def start(self) -> None:
        """Build the client; connecting happens on the first request. Idempotent."""
        if self._closed:
            raise ClosedError("etcd store is closed")
        if self._client is not None:
            return
        creds = self._tls.credentials() if self._tls is not None else None
        endpoints = [
            etcd3.Endpoint(
                host,
                port,
                secure=creds is not None,
                creds=creds,
                time_retry=_ENDPOINT_RETRY_S,
                opts=_GRPC_OPTIONS,
            )
            for host, port in self._endpoints
        ]
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tso-etcd")

        def build() -> Any:
            # with a user the client authenticates in its constructor: that is I/O
            try:
                client = etcd3.MultiEndpointEtcd3Client(
                    endpoints=endpoints,
                    timeout=self._request_timeout_s,
                    user=self._user,
                    password=self._password,
                    failover=True,
                )
            except grpc.RpcError as exc:
                # like etcd's Go client: credentials for a cluster without auth are
                # not an error, the calls simply go without a token
                if "authentication is not enabled" not in str(exc.details()):
                    raise
                client = etcd3.MultiEndpointEtcd3Client(
                    endpoints=endpoints, timeout=self._request_timeout_s, failover=True
                )
            if creds is None:
                # gRPC sends call credentials only over TLS; without TLS the token
                # goes as plain metadata, which the client also attaches (as etcdctl
                # does over http). Use TLS wherever the network is not trusted.
                client.call_credentials = None
            return client

        if self._user is None:
            self._client = build()
            return
        try:
            self._client = await asyncio.get_running_loop().run_in_executor(self._executor, build)
        except Exception as exc:
            if isinstance(exc, grpc.RpcError) and exc.code() in _REFUSED_LOGIN:
                # etcd answered and said no: trying again cannot help (the password
                # itself is never part of the message)
                raise MisconfiguredError(
                    f"etcd refused the login of user {self._user!r} ({exc.code().name}): "
                    "check the etcd user and its password file"
                ) from None
            raise UnavailableError(
                f"etcd authentication as {self._user!r} failed: {type(exc).__name__}"
            ) from None

    async def close(self) -> None:
        """Drop the connection; idempotent. Calls still running in threads end on their own."""
        if self._closed:
            return
        self._closed = True
        client, self._client = self._client, None
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if client is not None:
            try:
                client.close()
            except Exception:
                _log.debug("closing the etcd client failed", exc_info=True)

    def _require(self) -> tuple[Any, ThreadPoolExecutor]:
        if self._closed:
            raise ClosedError("etcd store is closed")
        if self._client is None or self._executor is None:
            raise ClosedError("etcd store is not started")
        return self._client, self._executor

    async def _call(self, what: str, fn: Callable[[Any], _T], timeout: float | None) -> _T:
        client, executor = self._require()
        loop = asyncio.get_running_loop()
        bound = self._unavailable_after_s if timeout is None else timeout
        deadline = loop.time() + bound
        # a transient failure is tried again until the deadline (others raise at once)
        retry = Retry(
            _RETRY_BACKOFF,
            deadline=deadline,
            clip_to_deadline=True,
            retry_if=_is_transient,
            clock=loop.time,
        )
        last: BaseException | None = None
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                future = loop.run_in_executor(executor, fn, client)
            except RuntimeError as exc:  # executor shut down under us
                raise ClosedError("etcd store is closed") from exc
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancellation
                # that races with the result, and the caller would never stop.
                async with asyncio.timeout(remaining):
                    return await future
            except TimeoutError as exc:
                last = exc
                break
            except Exception as exc:
                if not _is_transient(exc):
                    raise UnavailableError(f"etcd {what} failed: {exc!r}") from exc
                last = exc
                delay = retry.next(exc)
                if delay is None:
                    break
            await retry.wait(delay)
        raise UnavailableError(
            f"etcd {what}: no answer within {bound:.2f}s from {', '.join(self.endpoints)}"
            + (f" ({last!r})" if last is not None and str(last) else "")
        ) from last

    async def get(self, key: str, *, timeout: float | None = None) -> bytes | None:
        def op(client: Any) -> bytes | None:
            value, _meta = client.get(key)
            return bytes(value) if value is not None else None

        return await self._call("get", op, timeout)

    async def read_revision(
        self, key: str, *, timeout: float | None = None
    ) -> tuple[bytes | None, int]:
        """The value of ``key`` and its mod revision (``None`` and 0: absent), the pair a
        later :meth:`put_if` compares against."""

        def op(client: Any) -> tuple[bytes | None, int]:
            value, meta = client.get(key)
            if value is None or meta is None:
                return None, 0
            return bytes(value), int(meta.mod_revision)

        return await self._call("get", op, timeout)

    async def put_if(
        self, key: str, value: bytes, mod_revision: int, *, timeout: float | None = None
    ) -> bool:
        """Put ``key`` only while it is at ``mod_revision`` (0: absent); ``False`` when
        someone changed it meanwhile."""

        def op(client: Any) -> bool:
            txn = client.transactions
            ok, _ = client.transaction(
                compare=[txn.mod(key) == mod_revision], success=[txn.put(key, value)], failure=[]
            )
            return bool(ok)

        return await self._call("conditional put", op, timeout)

    async def delete(self, key: str, *, timeout: float | None = None) -> bool:
        """Delete ``key``; ``True`` if it was there."""

        def op(client: Any) -> bool:
            return bool(client.delete(key))

        return await self._call("delete", op, timeout)

    async def grant_lease(self, ttl_s: int, *, timeout: float | None = None) -> tuple[int, int]:
        def op(client: Any) -> tuple[int, int]:
            lease = client.lease(ttl_s)
            return int(lease.id), int(lease.ttl)

        return await self._call("lease grant", op, timeout)

    async def refresh_lease(self, lease_id: int, *, timeout: float | None = None) -> int:
        def op(client: Any) -> int:
            for response in list(client.refresh_lease(lease_id)):
                return max(0, int(response.TTL))
            return 0

        return await self._call("lease keepalive", op, timeout)

    async def revoke_lease(self, lease_id: int, *, timeout: float | None = None) -> None:
        def op(client: Any) -> None:
            try:
                client.revoke_lease(lease_id)
            except grpc.RpcError as exc:
                if not _is_not_found(exc):
                    raise

        await self._call("lease revoke", op, timeout)

    async def revoke_if_value(
        self, key: str, value: bytes, *, timeout: float | None = None
    ) -> bool:
        def op(client: Any) -> int:
            current, meta = client.get(key)
            if current is None or bytes(current) != value or not int(meta.lease_id):
                return 0
            return int(meta.lease_id)

        lease = await self._call("get lease", op, timeout)
        if not lease:
            return False
        await self.revoke_lease(lease, timeout=timeout)
        return True

    async def create_if_absent(
        self, key: str, value: bytes, lease_id: int, *, timeout: float | None = None
    ) -> tuple[bool, bytes | None]:
        def op(client: Any) -> tuple[bool, bytes | None]:
            txn = client.transactions
            succeeded, responses = client.transaction(
                compare=[txn.create(key) == 0],
                success=[txn.put(key, value, lease=lease_id)],
                failure=[txn.get(key)],
            )
            if succeeded:
                return True, value
            kvs = responses[0] if responses else []
            if not kvs:
                return False, None
            current, meta = kvs[0]
            current = bytes(current)
            return current == value and int(meta.lease_id) == lease_id, current

        return await self._call("leader create", op, timeout)

    async def delete_if_value(
        self, key: str, value: bytes, *, timeout: float | None = None
    ) -> bool:
        def op(client: Any) -> bool:
            txn = client.transactions
            succeeded, _ = client.transaction(
                compare=[txn.value(key) == value], success=[txn.delete(key)], failure=[]
            )
            return bool(succeeded)

        return await self._call("guarded delete", op, timeout)

    async def delete_prefix(self, prefix: str, *, timeout: float | None = None) -> None:
        """Delete every key under ``prefix`` (tools and benchmarks clean up with it)."""
        if not prefix.strip("/"):
            raise InvalidInputError(f"prefix: refusing to delete a root prefix: {prefix!r}")

        def op(client: Any) -> None:
            client.delete_prefix(prefix)

        await self._call("delete prefix", op, timeout)

    async def _put_window(self, save: WindowSave, timeout: float | None) -> WindowRefusal | None:
        key, new = save.key, save.window

        def op(client: Any) -> WindowRefusal | None:
            txn = client.transactions
            fence = txn.create(key) == 0 if save.first else txn.value(key) < new
            succeeded, responses = client.transaction(
                compare=[txn.value(save.leader_key) == save.leader_value, fence],
                success=[txn.put(key, new)],
                failure=[txn.get(save.leader_key), txn.get(key)],
            )
            if succeeded:
                return None
            leader_kvs, window_kvs = responses
            leader_now = bytes(leader_kvs[0][0]) if leader_kvs else None
            stored = bytes(window_kvs[0][0]) if window_kvs else None
            return leader_now, stored

        refused = await self._call("window save", op, timeout)
        if refused == (save.leader_value, new):  # a retried save whose first attempt had applied
            return None
        return refused
