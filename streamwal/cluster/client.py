"""``ClusterClient``: append to a channel wherever the cluster placed it.

The owner comes from etcd (``assign/<channel>``, then the owner's ``nodes/<id>``
record), or, for a client given ``nodes`` instead of etcd endpoints, from any of
those nodes' ``ClusterRouting`` service; either way it is cached. An append the node
answered FAILED_PRECONDITION (fenced: the channel moved), NOT_FOUND (not, or no
longer, open there) or UNAVAILABLE (node down or stopping) and *not written* drops
the cached owner, looks it up again and tries again, backing off from 50 ms to
``max_backoff_s`` (0.25 s: a failover's end is seen within a quarter of a second,
at four look-ups a second per waiting channel), for at most ``retry_for_s``.

Appends are idempotent: the client numbers each one once (one
:class:`~streamwal.node.idempotence.ProducerIdentity` shared by the clients of every
node) and every try carries the same numbers. So an append whose outcome is unknown
(the owner died or the answer was lost) is retried too, on whichever node owns the
channel then: the new owner rebuilt the producer's window from the log, and answers
a copy already there with its first position. Every acknowledged append is in the log
once. The WAL takes numbers out of order within its window, so concurrent appends
and retries overtaken by later numbers are fine up to a window
(``wal.idempotence_window``) of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from types import TracebackType

import grpc

from streamwal.cluster.proto import routing_pb2 as routing_pb
from streamwal.cluster.proto import routing_pb2_grpc as routing_grpc
from streamwal.cluster.records import Assignment, ClusterKeys, NodeRecord, decode
from streamwal.cluster.store import ClusterStore
from streamwal.errors import (
    ChannelNotFoundError,
    InvalidInputError,
    OutcomeUnknownError,
    UnavailableError,
    WriteOutcome,
)
from streamwal.node.client import Acked, NodeClient, give_up
from streamwal.node.idempotence import ProducerIdentity
from streamwal.node.outcome import write_outcome
from streamwal.tso.tls import ClientTLS, open_channel

__all__ = ["ClusterClient"]

_FOLLOW = frozenset(
    {
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.UNAVAILABLE,
    }
)


# refused for good whatever the owner: retrying them only repeats the answer
_FINAL = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)


class ClusterClient:
    """``async with ClusterClient(etcd_endpoints, key_prefix=...) as client``, or
    ``ClusterClient(nodes=[address, ...])`` to look owners up through the nodes.

    Safe to use from many tasks at once; one gRPC channel per node is shared.
    ``moves_followed`` counts the look-ups a refused append caused.
    """

    def __init__(
        self,
        etcd_endpoints: Sequence[str] = (),
        *,
        nodes: Sequence[str] = (),
        key_prefix: str = "/streamwal",
        tls: ClientTLS | None = None,
        retry_for_s: float = 30.0,
        max_backoff_s: float = 0.25,
        timeout: float = 10.0,
        tracing: bool = True,
        etcd_user: str | None = None,
        etcd_password: str | None = None,
    ) -> None:
        if bool(etcd_endpoints) == bool(nodes):
            raise InvalidInputError("ClusterClient: give either etcd_endpoints or nodes")
        self._store: ClusterStore | None = None
        if etcd_endpoints:
            self._store = ClusterStore(
                etcd_endpoints,
                request_timeout_s=1.0,
                unavailable_after_s=3.0,
                user=etcd_user,
                password=etcd_password,
            )
        self._routers = list(nodes)
        self._router_channels: dict[str, grpc.aio.Channel] = {}
        self._keys = ClusterKeys(key_prefix)
        self._tls = tls
        self._retry_for = retry_for_s
        self._max_backoff = max_backoff_s
        self._timeout = timeout
        self._tracing = tracing
        self._owners: dict[str, str] = {}
        self._nodes: dict[str, NodeClient] = {}
        self.producer = ProducerIdentity()
        """The identity every append is numbered with, on whichever node it lands."""
        self.moves_followed = 0

    async def __aenter__(self) -> ClusterClient:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        if self._store is not None:
            await self._store.start()

    async def close(self) -> None:
        nodes, self._nodes = self._nodes, {}
        for node in nodes.values():
            with contextlib.suppress(Exception):
                await node.close()
        routers, self._router_channels = self._router_channels, {}
        for channel in routers.values():
            await channel.close()
        if self._store is not None:
            await self._store.close()

    async def owner(self, channel: str, *, refresh: bool = False) -> str:
        """The address of the node that owns ``channel``; :class:`ChannelNotFoundError`
        while it has no live owner."""
        if not refresh and channel in self._owners:
            return self._owners[channel]
        if self._store is None:
            address = await self._route(channel)
            self._owners[channel] = address
            return address
        raw = await self._store.get(self._keys.assign + channel)
        if raw is None:
            raise ChannelNotFoundError(channel)
        assignment = decode(Assignment, raw)
        raw_node = await self._store.get(self._keys.node(assignment.node))
        if raw_node is None:
            raise ChannelNotFoundError(channel)
        address = decode(NodeRecord, raw_node).address
        self._owners[channel] = address
        return address

    async def _route(self, channel: str) -> str:
        """Ask the nodes in turn, starting with the last one that answered."""
        last: BaseException | None = None
        for address in list(self._routers):
            rpc = self._router_channels.get(address)
            if rpc is None:
                rpc = self._router_channels[address] = open_channel(address, self._tls)
            try:
                answer = await routing_grpc.ClusterRoutingStub(rpc).LookupChannel(
                    routing_pb.LookupChannelRequest(pchannel=channel), timeout=self._timeout
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    raise ChannelNotFoundError(channel) from None
                last = exc
                self._routers.remove(address)
                self._routers.append(address)  # ask it last next time
                continue
            return str(answer.address)
        raise UnavailableError(f"no node answered a look-up of {channel!r}: {last}")

    def _node(self, address: str) -> NodeClient:
        node = self._nodes.get(address)
        if node is None:
            node = self._nodes[address] = NodeClient(
                address,
                tls=self._tls,
                timeout=self._timeout,
                tracing=self._tracing,
                producer=self.producer,
            )
        return node

    async def produce(
        self,
        channel: str,
        payload: bytes,
        *,
        type: str = "insert",
        vchannel: str = "",
        properties: Mapping[str, str] | None = None,
    ) -> Acked:
        """Append to ``channel`` on its owner, following moves (see the module docstring).

        Raises the last ``grpc.aio.AioRpcError`` when the retry time is spent or the
        node refused the append for good, :class:`ChannelNotFoundError` when no owner
        appeared.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_for
        delay = 0.05
        refresh = False
        producer_id = self.producer.producer_id
        sequence = self.producer.next_sequence(channel)
        sent: grpc.aio.AioRpcError | None = None  # a try that may have been written
        while True:
            try:
                address = await self.owner(channel, refresh=refresh)
                return await self._node(address).produce(
                    channel,
                    payload,
                    type=type,
                    vchannel=vchannel,
                    properties=properties,
                    producer_id=producer_id,
                    sequence=sequence,
                )
            except (ChannelNotFoundError, UnavailableError) as exc:
                if loop.time() + delay > deadline:
                    self._give_up(channel, producer_id, sequence, sent)
                    if sent is not None:  # an earlier try may be in the log
                        raise OutcomeUnknownError(
                            f"append to {channel!r}: an earlier try's outcome is unknown "
                            f"({sent.code().name}), and then {exc}"
                        ) from exc
                    raise
            except grpc.aio.AioRpcError as exc:
                outcome = write_outcome(exc)
                if outcome is WriteOutcome.UNKNOWN:
                    sent = exc
                if not _worth_another_try(exc, outcome) or loop.time() + delay > deadline:
                    self._give_up(channel, producer_id, sequence, exc)
                    raise
            self._owners.pop(channel, None)
            self.moves_followed += 1
            refresh = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_backoff)

    def _give_up(
        self, channel: str, producer_id: int, sequence: int, exc: grpc.aio.AioRpcError | None
    ) -> None:
        """``exc``: the last try's error, or None when no try was sent at all."""
        if producer_id != self.producer.producer_id:
            return  # renewed meanwhile by another append's give-up
        if exc is None:
            self.producer.give_up(channel, sequence, WriteOutcome.NOT_WRITTEN)
        else:
            give_up(self.producer, channel, sequence, exc)


def _worth_another_try(exc: grpc.aio.AioRpcError, outcome: WriteOutcome) -> bool:
    """A move (refused, not written) or an unknown outcome: the same numbers make a
    second try safe. Anything else (bad input, a sequence refused) fails the same way
    again."""
    if outcome is WriteOutcome.UNKNOWN:
        return exc.code() not in _FINAL
    return exc.code() in _FOLLOW
