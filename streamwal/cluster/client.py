"""``ClusterClient``: append to a channel wherever the cluster placed it.

The module stays whole past 500 lines because it is one role, finding a channel's owner
and trying each call again there: the transaction handle and the wire message id below
exist only for :class:`ClusterClient`, and the node calls it makes are
:mod:`streamwal.node.client`.

The owner comes from etcd (``assign/<channel>``, then the owner's ``nodes/<id>``
record), or, for a client given ``nodes`` instead of etcd endpoints, from any of
those nodes' ``ClusterRouting`` service; either way it is cached. An append the node
answered FAILED_PRECONDITION (fenced: the channel moved), NOT_FOUND (not, or no
longer, open there) or UNAVAILABLE (node down or stopping) and *not written* drops
the cached owner, looks it up again and tries again, backing off from 50 ms to
``max_backoff_s`` (0.25 s: a failover's end is seen within a quarter of a second,
at four look-ups a second per waiting channel), for at most ``retry_for_s``.
A call that waited so is a span of its own, linked to the move that ended the wait
(:mod:`.waits`).

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
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

import grpc

from streamwal.backoff import Backoff
from streamwal.cluster.metrics import WriteGaps
from streamwal.cluster.moving import MoveResult, move_channel
from streamwal.cluster.proto import routing_pb2 as routing_pb
from streamwal.cluster.proto import routing_pb2_grpc as routing_grpc
from streamwal.cluster.records import Assignment, ClusterKeys, NodeRecord, decode
from streamwal.cluster.routing import NO_SUCH_CHANNEL
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.waits import NO_OWNER_DETAIL, OwnerWait
from streamwal.errors import (
    ChannelFencedError,
    ChannelNotFoundError,
    InvalidInputError,
    NoClusterError,
    NoSuchChannelError,
    StreamwalError,
    UnavailableError,
    WriteOutcome,
)
from streamwal.lifecycle import Startable
from streamwal.node.client import (
    Acked,
    BatchProduceError,
    Consumed,
    NodeClient,
    WireMessageId,
    final_error,
    give_up,
    wire_policy,
)
from streamwal.node.client_errors import NodeCallError, NodeOutcomeUnknownError, read_error
from streamwal.node.idempotence import ProducerIdentity
from streamwal.node.outcome import write_outcome
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.retry import Retry
from streamwal.tso.config import DEFAULT_KEY_PREFIX, EtcdConfig
from streamwal.tso.tls import ClientTLS, default_token, open_channel
from streamwal.wal.backend import DeliveryPolicy

__all__ = ["ClusterClient", "Transaction", "WireMessageId"]

_T = TypeVar("_T")
#: the first wait before a look-up again (then doubled up to ``max_backoff_s``)
_FIRST_BACKOFF_S = 0.05
# a transaction lives on one owner: its calls are retried there, not followed elsewhere
_TXN_RETRIES = 3

_FOLLOW = frozenset(
    {
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.UNAVAILABLE,
    }
)

#: the caller is not known or not allowed: the nodes of a cluster share their auth
_REFUSED_CALLER = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})

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


class ClusterClient(Startable):
    """``async with ClusterClient(etcd_endpoints, key_prefix=...) as client``, or
    ``ClusterClient(nodes=[address, ...])`` to look owners up through the nodes.

    Safe to use from many tasks at once; one gRPC channel per node is shared.
    ``moves_followed`` counts the look-ups a refused append caused. ``tls`` and
    ``token`` (unset: the file ``STREAMWAL_TOKEN_FILE`` names, if any) are how it
    reaches nodes with TLS and ``auth.enabled``; a refusal (UNAUTHENTICATED,
    PERMISSION_DENIED) is raised at once, not followed to another node. ``etcd``
    (instead of ``etcd_endpoints``): an :class:`~streamwal.tso.config.EtcdConfig`, a
    node file's ``etcd:`` section, with the etcd user, password and TLS (a CA, a
    client certificate) it names.
    """

    def __init__(
        self,
        etcd_endpoints: Sequence[str] = (),
        *,
        nodes: Sequence[str] = (),
        key_prefix: str = DEFAULT_KEY_PREFIX,
        tls: ClientTLS | None = None,
        token: str | None = None,
        retry_for_s: float = 30.0,
        max_backoff_s: float = 0.25,
        timeout: float = 10.0,
        tracing: bool = True,
        etcd_user: str | None = None,
        etcd_password: str | None = None,
        etcd: EtcdConfig | None = None,
    ) -> None:
        if bool(etcd_endpoints or etcd) == bool(nodes):
            raise InvalidInputError("ClusterClient: give either etcd_endpoints (or etcd) or nodes")
        if etcd is not None and (etcd_endpoints or etcd_user or etcd_password):
            raise InvalidInputError(
                "ClusterClient: etcd (an EtcdConfig) says the endpoints and credentials; "
                "give it without etcd_endpoints, etcd_user, etcd_password"
            )
        self._store: ClusterStore | None = None
        if etcd is not None:
            self._store = ClusterStore.from_etcd(
                etcd, request_timeout_s=1.0, unavailable_after_s=3.0
            )
        elif etcd_endpoints:
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
        self._token = default_token(token)  # read once: every node is sent the same
        self._retry_for = retry_for_s
        if not max_backoff_s > 0:
            raise InvalidInputError(f"max_backoff_s: must be > 0, got {max_backoff_s!r}")
        # looked up again after 50 ms, then twice as long each time up to max_backoff_s
        self._backoff = Backoff(initial=min(_FIRST_BACKOFF_S, max_backoff_s), maximum=max_backoff_s)
        self._timeout = timeout
        self._tracing = tracing
        self._owners: dict[str, str] = {}
        #: the assignment each cached owner came from (its move's trace, for a wait's link)
        self._assignments: dict[str, Assignment] = {}
        self._nodes: dict[str, NodeClient] = {}
        self.producer = ProducerIdentity()
        """The identity every append is numbered with, on whichever node it lands."""
        self.moves_followed = 0
        self._gaps = WriteGaps()

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

    async def move(self, channel: str, node: int, *, timeout_s: float = 30.0) -> MoveResult:
        """Move ``channel`` to ``node`` as ``streamwal cluster move`` does (the balancer
        carries it out, :mod:`streamwal.cluster.moving`) and wait until it serves
        there; the refusals are that module's. Needs the etcd form of the client: the
        move is written to the cluster's keys."""
        if self._store is None:
            raise InvalidInputError(
                "ClusterClient.move needs etcd_endpoints (the move is written to etcd)"
            )
        result = await move_channel(self._store, self._keys, channel, node, timeout_s=timeout_s)
        self._owners.pop(channel, None)
        return result

    async def owner(self, channel: str, *, refresh: bool = False) -> str:
        """The address of the node that owns ``channel``; :class:`ChannelNotFoundError`
        while it has no live owner, :class:`NoSuchChannelError` (at once, not retried)
        when the cluster's channel set does not hold it (both forms: etcd, or the
        nodes' look-up), :class:`~streamwal.errors.NoClusterError` (at once) when
        nothing of a cluster is under the key prefix."""
        if not refresh and channel in self._owners:
            return self._owners[channel]
        if self._store is None:
            address = await self._route(channel)
            self._owners[channel] = address
            return address
        raw = await self._store.get(self._keys.assign + channel)
        if raw is None:
            await self._require_in_set(channel)
            raise ChannelNotFoundError(channel, f"channel {channel!r} {NO_OWNER_DETAIL}")
        assignment = self._assignments[channel] = decode(Assignment, raw)
        raw_node = await self._store.get(self._keys.node(assignment.node))
        if raw_node is None:
            raise ChannelNotFoundError(channel)
        address = decode(NodeRecord, raw_node).address
        self._owners[channel] = address
        return address

    async def _require_in_set(self, channel: str) -> None:
        """:class:`NoSuchChannelError` when the cluster's set is written (``seeded``) and
        lacks ``channel``: waiting would not make it appear. Before the first balancer
        seeded the set, a configured channel may still come."""
        assert self._store is not None
        if await self._store.get(self._keys.channels + channel) is not None:
            return
        if await self._store.get(self._keys.seeded) is not None:
            raise NoSuchChannelError(
                channel, f"not in the channel set of the cluster under {self._keys.root}"
            )
        if await self._store.get(self._keys.balancer) is None:
            _revision, nodes = await self._store.read_prefix(self._keys.nodes)
            if not nodes:
                raise NoClusterError(self._keys.root)

    async def _route(self, channel: str) -> str:
        """Ask the nodes in turn, starting with the last one that answered."""
        last: BaseException | None = None
        for address in list(self._routers):
            rpc = self._router_channels.get(address)
            if rpc is None:
                rpc = self._router_channels[address] = open_channel(
                    address, self._tls, token=self._token
                )
            try:
                answer = await routing_grpc.ClusterRoutingStub(rpc).LookupChannel(
                    routing_pb.LookupChannelRequest(pchannel=channel), timeout=self._timeout
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    if NO_SUCH_CHANNEL in tuple(exc.trailing_metadata() or ()):
                        raise NoSuchChannelError(
                            channel, f"not in the cluster's channel set, says {address}"
                        ) from None
                    raise ChannelNotFoundError(
                        channel, f"channel {channel!r} has no live owner now (asked {address})"
                    ) from None
                if exc.code() in _REFUSED_CALLER:  # every node of the cluster says the same
                    raise read_error(exc) from None
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
                token=self._token,
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
        txn_id: int | None = None,
    ) -> Acked:
        """Append to ``channel`` on its owner, following moves (see the module docstring).

        Raises a typed :class:`~streamwal.errors.StreamwalError` (see
        :mod:`streamwal.node.client_errors`) when the retry time is spent or the node
        refused the append for good: ``outcome`` not written only when no try of it
        can have been written (its number is then handed back), else
        :class:`~streamwal.errors.OutcomeUnknownError`.
        :class:`ChannelNotFoundError` when no owner appeared and nothing was sent.
        """
        producer_id, sequence = await self.producer.reserve(channel, 1)

        async def one_try(node: NodeClient) -> Acked:
            return await node.produce(
                channel,
                payload,
                type=type,
                vchannel=vchannel,
                properties=properties,
                txn_id=txn_id,
                producer_id=producer_id,
                sequence=sequence,
            )

        return await self._numbered(channel, one_try, producer_id, sequence, sequence)

    async def produce_batch(
        self,
        channel: str,
        payloads: Sequence[bytes],
        *,
        type: str = "insert",
        vchannel: str = "",
    ) -> list[Acked]:
        """Append ``payloads`` back to back on ``channel``'s owner, following moves as
        :meth:`produce` does: the batch is numbered once, so a retried batch lands each
        message once. A batch that landed in part raises
        :class:`~streamwal.node.client.BatchProduceError` (which says what landed)."""
        if not payloads:
            return []
        producer_id, first = await self.producer.reserve(channel, len(payloads))

        async def one_try(node: NodeClient) -> list[Acked]:
            return await node.produce_batch(
                channel, payloads, type=type, vchannel=vchannel, numbers=(producer_id, first)
            )

        last = first + len(payloads) - 1
        return await self._numbered(channel, one_try, producer_id, first, last)

    async def produce_stream(
        self,
        channel: str,
        payloads: Sequence[bytes] | AsyncIterator[bytes],
        *,
        type: str = "insert",
        vchannel: str = "",
        in_flight: int = 64,
    ) -> AsyncIterator[Acked]:
        """Appends pipelined ``in_flight`` at a time, each numbered and followed across
        moves as :meth:`produce` follows it; their acknowledgements in the order given.
        The log order is the order given while nothing fails; an append retried after
        a failure lands after the ones already sent behind it. The first append that
        fails for good raises its error; every append acknowledged before it is in
        the log, and unanswered appends after it were cancelled or may be in the log
        (their outcomes: unknown)."""
        pending: deque[asyncio.Task[Acked]] = deque()

        async def source() -> AsyncIterator[bytes]:
            if isinstance(payloads, Sequence):
                for payload in payloads:
                    yield payload
            else:
                async for payload in payloads:
                    yield payload

        try:
            async for payload in source():
                pending.append(
                    asyncio.create_task(
                        self.produce(channel, payload, type=type, vchannel=vchannel)
                    )
                )
                if len(pending) >= in_flight:
                    yield await pending.popleft()
            while pending:
                yield await pending.popleft()
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # ---- transactions ----------------------------------------------------------------
    async def begin_txn(
        self, channel: str, vchannel: str = "", *, keepalive_s: float = 0.0
    ) -> Transaction:
        """Open a transaction on ``channel``'s owner (following moves to find it); its
        appends, keepalives, commit and rollback go to that owner. A move of the
        channel ends it (:class:`~streamwal.errors.TransactionError` on its next call):
        begin again on the new owner."""

        async def one_try(node: NodeClient) -> Transaction:
            txn_id = await node.begin_txn(channel, vchannel, keepalive_s, retries=_TXN_RETRIES)
            return Transaction(self, node, channel, vchannel, txn_id)

        return await self._following(channel, one_try)

    # ---- reads -----------------------------------------------------------------------
    async def consume(
        self,
        channel: str,
        policy: DeliveryPolicy | None = None,
        *,
        vchannel: str = "",
        stop: asyncio.Event | None = None,
        read_only: bool = False,
    ) -> AsyncGenerator[Consumed, None]:
        """Read ``channel`` from ``policy`` (:class:`~streamwal.DeliveryPolicy`, default
        all) through its owner, following it across moves: after a move the read goes
        on after the last message delivered, so nothing is skipped or repeated. It
        follows the tail until ``stop`` is set or the caller stops iterating (``break``,
        or ``aclose()``); a position from an :class:`Acked` is
        ``DeliveryPolicy.start_from(WireMessageId(acked.message_id))``.

        ``read_only``: any live node serves the read, owner or not (the owner when
        there is one, else another node), and a move does not end it; only a node that
        stops answering sends it to another one, after the last message delivered. A
        channel that does not exist is :class:`~streamwal.errors.ChannelNotFoundError`
        at once (nothing is created to find out)."""
        wire = wire_policy(policy or DeliveryPolicy.all())
        last: bytes | None = None
        loop = asyncio.get_running_loop()

        def follow(exc: BaseException) -> bool:
            if isinstance(exc, NoSuchChannelError):
                return False
            if (
                read_only
                and isinstance(exc, NodeCallError)
                and isinstance(exc, ChannelNotFoundError)
            ):
                return False  # a node asked read-only says the channel does not exist
            return not isinstance(exc, NodeCallError) or _follow(exc)

        retry = self._retries(follow)
        refresh = False
        address: str | None = None
        while stop is None or not stop.is_set():
            try:
                if read_only:
                    address = await self._reader(channel, avoid=address if refresh else None)
                else:
                    address = await self.owner(channel, refresh=refresh)
                stream = self._node(address).consume(
                    channel,
                    wire if last is None else pb.DeliveryPolicy(start_after=last),
                    vchannel=vchannel,
                    read_only=read_only,
                )
                async with contextlib.aclosing(stream):
                    async for message in _until(stream, stop):
                        last = message.message_id
                        retry.reset(deadline=loop.time() + self._retry_for)
                        yield message
                if stop is not None and stop.is_set():
                    return
                # the owner ended the read: the channel closed or moved there; follow it
                delay = retry.step()
            except (ChannelNotFoundError, UnavailableError, ChannelFencedError) as exc:
                failed = retry.next(exc)
                if failed is None:
                    raise
                delay = failed
            self._owners.pop(channel, None)
            self.moves_followed += 1
            refresh = True
            await retry.wait(delay)

    def _retries(self, retry_if: Callable[[BaseException], bool]) -> Retry:
        """One call's tries: this client's backoff, for ``retry_for_s`` from now (a read
        that delivers resets it)."""
        loop = asyncio.get_running_loop()
        return Retry(
            self._backoff,
            deadline=loop.time() + self._retry_for,
            retry_if=retry_if,
            clock=loop.time,
        )

    async def _reader(self, channel: str, *, avoid: str | None) -> str:
        """A node to read ``channel`` read-only from: its owner, or while it has none,
        any node of the cluster; never ``avoid`` (the node that last failed the read)
        while there is another one."""
        try:
            owner = await self.owner(channel, refresh=avoid is not None)
        except NoSuchChannelError:
            raise
        except (ChannelNotFoundError, UnavailableError) as exc:
            failed: StreamwalError | None = exc
        else:
            if owner != avoid:
                return owner
            failed = None
        nodes = await self._node_addresses()
        others = [a for a in nodes if a != avoid] or nodes
        if not others:
            raise failed or UnavailableError(f"no node of the cluster to read {channel!r} from")
        return others[0]

    async def _node_addresses(self) -> list[str]:
        """The addresses of the cluster's nodes (registered in etcd, or given)."""
        if self._store is None:
            return list(self._routers)
        _revision, entries = await self._store.read_prefix(self._keys.nodes)
        return sorted(decode(NodeRecord, e.value).address for e in entries)

    # ---- following the owner ---------------------------------------------------------
    async def _following(
        self,
        channel: str,
        one_try: Callable[[NodeClient], Awaitable[_T]],
        *,
        writes: bool = False,
    ) -> _T:
        """:meth:`_follow_tries`, its wait (if it waited) a span (:mod:`.waits`)."""
        wait = OwnerWait(channel) if self._tracing else None
        try:
            answer = await self._follow_tries(channel, one_try, writes=writes, wait=wait)
        except StreamwalError as exc:
            if wait is not None:
                wait.ended(self._assignments.get(channel), exc)
            raise
        if wait is not None:
            wait.ended(self._assignments.get(channel))
        return answer

    async def _follow_tries(
        self,
        channel: str,
        one_try: Callable[[NodeClient], Awaitable[_T]],
        *,
        writes: bool,
        wait: OwnerWait | None,
    ) -> _T:
        """``one_try`` on the channel's owner until it succeeds, fails for good or the
        retry time is spent. A call that may have been served (unknown outcome) is
        tried again only because every call made through here is idempotent; the
        final error's outcome is the strongest of all tries: unknown if any try's was.
        ``writes``: the tries are writes, whose gaps the client measures (a gap may
        span calls: one that gave up, then one that landed)."""
        retry = self._retries(_worth_following)
        refresh = False
        unknown: NodeCallError | None = None  # a try that may have been written
        maybe_written: set[int] = set()  # the same for a batch's messages
        while True:
            try:
                return await self._try(channel, one_try, refresh=refresh, writes=writes, wait=wait)
            except (ChannelNotFoundError, UnavailableError) as exc:
                if isinstance(exc, NoSuchChannelError):
                    raise
                if isinstance(exc, NodeCallError) and exc.outcome is WriteOutcome.UNKNOWN:
                    unknown = exc
                failed = retry.next(exc)
                if failed is not None:
                    delay = failed
                elif isinstance(exc, NodeCallError):
                    raise final_error(exc, unknown) from exc
                else:  # a look-up: nothing was sent
                    if unknown is not None:
                        raise NodeOutcomeUnknownError(
                            unknown.code(),
                            f"{channel!r}: an earlier try's outcome is unknown "
                            f"({unknown.code().name}: {unknown.details()}), and then {exc}",
                            WriteOutcome.UNKNOWN,
                        ) from exc
                    raise
            except NodeCallError as exc:
                if exc.outcome is WriteOutcome.UNKNOWN:
                    unknown = exc
                failed = retry.next(exc)
                if failed is None:
                    raise final_error(exc, unknown) from exc
                delay = failed
            except BatchProduceError as exc:
                # a numbered batch again lands each message once: the landed ones are
                # answered with their first results, the unknown ones looked up
                maybe_written |= {
                    i for i, e in exc.failed.items() if write_outcome(e) is WriteOutcome.UNKNOWN
                }
                failed = retry.next(exc)
                if failed is None:
                    raise _strongest(exc, maybe_written) from None
                delay = failed
            self._owners.pop(channel, None)
            self.moves_followed += 1
            refresh = True
            await retry.wait(delay)

    async def _try(
        self,
        channel: str,
        one_try: Callable[[NodeClient], Awaitable[_T]],
        *,
        refresh: bool,
        writes: bool,
        wait: OwnerWait | None = None,
    ) -> _T:
        """One try on the owner, its failure or acknowledgement noted for the write
        gap and the wait (a channel that does not exist, or bad input, is neither)."""
        try:
            answer = await one_try(self._node(await self.owner(channel, refresh=refresh)))
        except (NoSuchChannelError, InvalidInputError):
            raise
        except StreamwalError as exc:
            if writes:
                self._gaps.failed(channel)
            if wait is not None:
                wait.failed(exc)
            raise
        if writes:
            self._gaps.acknowledged(channel)
        return answer

    async def _numbered(
        self,
        channel: str,
        one_try: Callable[[NodeClient], Awaitable[_T]],
        producer_id: int,
        first: int,
        last: int,
    ) -> _T:
        """The one path of an append numbered ``first`` to ``last`` (a message, a
        batch), followed across moves: its numbers are given up when it fails for good
        (:meth:`_give_up`) and settled once it is answered either way."""
        try:
            return await self._following(channel, one_try, writes=True)
        except StreamwalError as exc:
            self._give_up(channel, producer_id, last, exc)
            raise
        finally:
            self.producer.settle(producer_id, channel, first)

    def _give_up(self, channel: str, producer_id: int, sequence: int, exc: StreamwalError) -> None:
        """Hand ``sequence`` back (known not written, the last numbered) or renew."""
        if isinstance(exc, BatchProduceError):
            self.producer.renew()  # part of a batch is in the log
            return
        # either call does nothing if another append's give-up renewed the identity
        if isinstance(exc, NodeCallError):
            give_up(self.producer, channel, (producer_id, sequence), exc)
        else:
            self.producer.give_up(producer_id, channel, sequence, exc.outcome)


class Transaction:
    """A transaction open on one owner (:meth:`ClusterClient.begin_txn`).

    ``async with`` commits on a clean exit and rolls back on an error. Every call
    raises a typed error: a :class:`~streamwal.errors.TransactionError` (nothing of
    the transaction is or will be delivered; begin again) or one whose ``outcome``
    says what a failed commit may have done (unknown: it may have committed).
    """

    def __init__(
        self, client: ClusterClient, node: NodeClient, channel: str, vchannel: str, txn_id: int
    ) -> None:
        self.channel = channel
        self.vchannel = vchannel
        self.txn_id = txn_id
        self._client = client
        self._node = node

    async def produce(
        self, payload: bytes, *, type: str = "insert", properties: Mapping[str, str] | None = None
    ) -> Acked:
        """Append into the transaction (numbered and retried on its owner only)."""
        return await self._node.produce(
            self.channel,
            payload,
            type=type,
            vchannel=self.vchannel,
            properties=properties,
            txn_id=self.txn_id,
        )

    async def keepalive(self) -> None:
        await self._node.keepalive_txn(self.channel, self.txn_id, retries=_TXN_RETRIES)

    async def commit(self) -> Acked:
        """Where the commit landed; retried on the owner, which answers a repeated
        commit with the first one's result."""
        return await self._node.commit_txn(self.channel, self.txn_id, retries=_TXN_RETRIES)

    async def rollback(self) -> Acked:
        return await self._node.rollback_txn(self.channel, self.txn_id, retries=_TXN_RETRIES)

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(self, _type: object, exc: object, _tb: object) -> None:
        if exc is None:
            await self.commit()
        else:
            with contextlib.suppress(StreamwalError):
                await self.rollback()


async def _until(
    stream: AsyncIterator[Consumed], stop: asyncio.Event | None
) -> AsyncIterator[Consumed]:
    """``stream``'s messages until ``stop`` is set, even while none arrives."""
    if stop is None:
        async for message in stream:
            yield message
        return
    stopped = asyncio.ensure_future(stop.wait())
    following: asyncio.Future[Consumed] | None = None
    try:
        while not stop.is_set():
            following = asyncio.ensure_future(anext(stream))
            await asyncio.wait((following, stopped), return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                return
            try:
                message = following.result()
            except StopAsyncIteration:
                return
            following = None
            yield message
    finally:
        stopped.cancel()
        if following is not None and not following.done():
            # the stream cannot be closed while a read of it is under way
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await following


def _strongest(exc: BatchProduceError, maybe_written: set[int]) -> BatchProduceError:
    """``exc`` with every message that an earlier try may have written said unknown."""
    results: list[Acked | grpc.aio.AioRpcError] = list(exc.results)
    for i, result in enumerate(results):
        if (
            i in maybe_written
            and isinstance(result, grpc.aio.AioRpcError)
            and write_outcome(result) is not WriteOutcome.UNKNOWN
        ):
            results[i] = NodeOutcomeUnknownError(
                result.code(),
                f"{result.details()} (an earlier try may have written it)",
                WriteOutcome.UNKNOWN,
            )
    return BatchProduceError(results)


def _follow(exc: NodeCallError) -> bool:
    return exc.code() in _FOLLOW


def _worth_following(exc: BaseException) -> bool:
    """Whether a failure through :meth:`ClusterClient._following` is tried again (on the
    owner looked up anew): a look-up's always, a call's or a whole batch's if
    :func:`_worth_another_try` says so for it (every failed message of a batch)."""
    if isinstance(exc, BatchProduceError):
        failed = exc.failed.values()
        return all(isinstance(e, NodeCallError) and _worth_another_try(e) for e in failed)
    if isinstance(exc, NodeCallError):
        return _worth_another_try(exc)
    return not isinstance(exc, NoSuchChannelError)


def _worth_another_try(exc: NodeCallError) -> bool:
    """A move (refused, not written) or an unknown outcome: the same numbers make a
    second try safe. Anything else (bad input, a sequence refused) fails the same way
    again."""
    if exc.outcome is WriteOutcome.UNKNOWN:
        return exc.code() not in _FINAL
    return exc.code() in _FOLLOW
