"""A timestamp source on a remote TSO service, following the leader.

Callers give one or more service addresses (any node of the TSO cluster). A fetch
goes to the node believed to lead; a follower's not-leader answer names the leader,
and the next attempt goes there. Unreachable nodes are skipped in turn. A fetch gives
up after ``timeout_s`` with :class:`UnavailableError` (or :class:`NotLeaderError`
when the last answer was a not-leader without a leader to follow).

With ``tls`` every address is dialled over TLS with the same credentials: the TSO
nodes of one cluster share a CA, and a node whose server requires client
certificates gets this source's certificate. ``token``: a bearer token sent with
every call, for TSO services on nodes with ``auth.enabled`` (an identity with the
``node`` role there).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import grpc
from grpc import aio

from streamwal.backoff import Backoff
from streamwal.errors import (
    ClosedError,
    InvalidInputError,
    NotLeaderError,
    StreamwalError,
    TimestampOverflowError,
    UnavailableError,
)
from streamwal.lifecycle import Closeable
from streamwal.retry import Retry
from streamwal.tso.proto import tso_pb2, tso_pb2_grpc
from streamwal.tso.service import LEADER_METADATA_KEY
from streamwal.tso.timestamp import MAX_LOGICAL
from streamwal.tso.tls import ClientTLS, open_channel

__all__ = ["RemoteSource"]

_log = logging.getLogger(__name__)

#: the waits between a fetch's tries, bounded by the fetch's ``timeout_s``
_RETRY_BACKOFF = Backoff(initial=0.02, maximum=0.25)

_RETRY_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)


class RemoteSource(Closeable):
    """:class:`~streamwal.tso.allocator.TimestampSource` over gRPC ``AllocTimestamp``.

    Channels are opened on first use (no I/O in ``__init__``) and kept per address;
    :meth:`close` closes them and is idempotent. Safe for concurrent fetches.
    """

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        timeout_s: float = 5.0,
        rpc_timeout_s: float = 1.0,
        tls: ClientTLS | None = None,
        token: str | None = None,
    ) -> None:
        addrs = [addresses] if isinstance(addresses, str) else list(addresses)
        addrs = [a.strip() for a in addrs if a and a.strip()]
        if not addrs:
            raise InvalidInputError("addresses: at least one TSO service address is needed")
        if timeout_s <= 0 or rpc_timeout_s <= 0:
            raise InvalidInputError("timeout_s: and rpc_timeout_s must be positive")
        self._addresses = list(dict.fromkeys(addrs))
        self._leader = self._addresses[0]
        self._timeout_s = timeout_s
        self._rpc_timeout_s = rpc_timeout_s
        self._tls = tls
        self._token = token
        # read the files now: a node whose certificate cannot be read must not start
        # (TLSFileError), rather than fail its first timestamp fetch
        self._credentials: grpc.ChannelCredentials | None = (
            tls.credentials() if tls is not None else None
        )
        self._channels: dict[str, aio.Channel] = {}
        self._stubs: dict[str, tso_pb2_grpc.TSOStub] = {}
        self._closed = False

    @property
    def leader(self) -> str:
        """The address the next fetch goes to first."""
        return self._leader

    @property
    def addresses(self) -> list[str]:
        return list(self._addresses)

    def _stub(self, address: str) -> tso_pb2_grpc.TSOStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = open_channel(
                address,
                self._tls,
                credentials=self._credentials,
                token=self._token,
                options=[
                    ("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.min_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 1000),
                ],
            )
            self._channels[address] = channel
            stub = self._stubs[address] = tso_pb2_grpc.TSOStub(channel)
        return stub

    def _rotate(self, failed: str) -> None:
        if self._leader != failed:
            return
        if failed in self._addresses:
            index = (self._addresses.index(failed) + 1) % len(self._addresses)
            self._leader = self._addresses[index]
        else:
            self._leader = self._addresses[0]

    async def fetch(self, count: int) -> int:
        if self._closed:
            raise ClosedError("remote TSO source is closed")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count < MAX_LOGICAL:
            raise InvalidInputError(f"count: must be in [1, {MAX_LOGICAL}): {count!r}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        request = tso_pb2.AllocTimestampRequest(count=count)
        last: StreamwalError | None = None
        # what is not raised at once (not leader, unavailable, overflow) is retriable:
        # tried again until the deadline, the last wait cut to it
        retry = Retry(_RETRY_BACKOFF, deadline=deadline, clip_to_deadline=True, clock=loop.time)
        redirects = 0
        while True:
            if self._closed:
                raise ClosedError("remote TSO source is closed")
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            address = self._leader
            try:
                response = await self._stub(address).AllocTimestamp(
                    request, timeout=min(self._rpc_timeout_s, remaining)
                )
                return int(response.timestamp)
            except aio.AioRpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.FAILED_PRECONDITION:
                    leader = _leader_of(exc)
                    last = NotLeaderError(leader)
                    if leader and leader != address:
                        _log.debug("TSO at %s is not leader; following %s", address, leader)
                        if leader not in self._addresses:
                            self._addresses.append(leader)
                        self._leader = leader
                        redirects += 1
                        if redirects <= 3:
                            continue
                    self._rotate(address)
                elif code in _RETRY_CODES:
                    last = UnavailableError(f"TSO at {address}: {code.name} {exc.details()}")
                    self._rotate(address)
                elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    last = TimestampOverflowError(exc.details() or "TSO logical overflow")
                elif code == grpc.StatusCode.INVALID_ARGUMENT:
                    raise InvalidInputError(exc.details() or "invalid TSO request") from exc
                else:
                    raise UnavailableError(
                        f"TSO at {address} failed: {code.name} {exc.details()}"
                    ) from exc
            assert last is not None
            delay = retry.next(last)
            if delay is None:
                break
            await retry.wait(delay)
        if isinstance(last, NotLeaderError | TimestampOverflowError):
            raise last
        raise UnavailableError(
            f"no TSO leader answered within {self._timeout_s:.2f}s "
            f"(tried {', '.join(self._addresses)})" + (f": {last}" if last is not None else "")
        )

    async def close(self) -> None:
        """Close the channels; idempotent. Later fetches raise :class:`ClosedError`."""
        if self._closed:
            return
        self._closed = True
        channels, self._channels = self._channels, {}
        self._stubs = {}
        for channel in channels.values():
            await channel.close()


def _leader_of(exc: aio.AioRpcError) -> str | None:
    for key, value in exc.trailing_metadata() or ():
        if key == LEADER_METADATA_KEY:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return text or None
    return None
