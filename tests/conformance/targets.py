"""The targets the WAL contract's conformance suite runs on, behind one small interface.

A target gives owners of a channel on one of its nodes (opening one fences the one
before, as Milvus's ``OpenerImpls.Open`` with a higher term does), reads from a policy
through an owner or read-only on any node, and the retention calls. Three targets:
the in-process backend (``memory``), the library over Pulsar (``pulsar``) and node
processes over gRPC (``node``). Messages come back as :class:`Seen`, ids as the bytes
both the library and the node hand out, so one assertion reads the same on each.

Building a message and reading its fields back happen in :func:`library_message` and
:func:`seen_of` / :func:`seen_of_consumed` only: a change of the message format
changes these few lines, not the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.errors import ChannelNotFoundError, InvalidInputError
from streamwal.node.client import Consumed, NodeClient, policy
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.wal.backend import BackendOpener, DeliveryPolicy
from streamwal.wal.initializing import open_read_only, open_wal
from streamwal.wal.message import ImmutableMessage, MessageType, MutableMessage
from streamwal.wal.wal import WAL
from tests.wal.testkit import BatchAllocator, CounterTSO, fast_config

__all__ = [
    "Acked",
    "LibraryTarget",
    "NodeTarget",
    "Owner",
    "Policy",
    "Seen",
    "Target",
    "library_message",
]

#: the WAL's own record types (what it writes itself; a caller's append never is one)
WAL_TYPES = frozenset({"TimeTick", "BeginTxn", "CommitTxn", "RollbackTxn"})


@dataclass(frozen=True)
class Acked:
    """An acknowledged append: its id (the bytes a client holds) and time tick."""

    id: bytes
    time_tick: int


@dataclass(frozen=True)
class Seen:
    """A delivered message, the same fields on every target."""

    id: bytes
    time_tick: int
    type: str
    payload: bytes
    properties: dict[str, str] = field(default_factory=dict)
    source: int = 0

    @property
    def wal_record(self) -> bool:
        return self.type in WAL_TYPES


@dataclass(frozen=True)
class Policy:
    """Where a read starts: ``all``, ``latest``, ``from`` (an id, inclusive) or
    ``after`` (an id, exclusive)."""

    kind: str
    id: bytes = b""

    @classmethod
    def all(cls) -> Policy:
        return cls("all")

    @classmethod
    def latest(cls) -> Policy:
        return cls("latest")

    @classmethod
    def start_from(cls, message_id: bytes) -> Policy:
        return cls("from", message_id)

    @classmethod
    def start_after(cls, message_id: bytes) -> Policy:
        return cls("after", message_id)


class Owner(Protocol):
    """One owner (term) of a channel."""

    node: int
    first_time_tick: int
    first_id: bytes

    async def append(
        self, payload: bytes, properties: Mapping[str, str] | None = None, type: str = "Insert"
    ) -> Acked: ...

    async def checkpoint(self, consumer: str, message_id: bytes, time_tick: int) -> None: ...

    async def truncate(self, retention_s: float) -> bytes | None:
        """Truncate by a retention window now; the truncation point (``None``: none)."""
        ...

    async def truncate_to(self, message_id: bytes) -> bytes | None:
        """Truncate every message up to and including ``message_id``; the last id
        truncated, after the checkpoints' clamp (``None``: nothing new)."""
        ...

    async def close(self) -> None:
        """Give the channel up (the library closes its WAL, a node removes it)."""
        ...


class Target(Protocol):
    name: str
    #: how many nodes owners and readers can be placed on
    nodes: int

    def channel(self, tag: str) -> str: ...

    def log_order(self, message_id: bytes) -> tuple[int, ...]:
        """What orders ids as the log does (the bytes themselves need not)."""
        ...

    async def open(self, channel: str, node: int) -> Owner:
        """Take ``channel`` over on ``node``: fences the owner before, if any."""
        ...

    def read(
        self, channel: str, where: Policy, *, node: int, read_only: bool
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Seen]]:
        """Messages of ``channel`` from ``where``, read through ``node``: its owner
        there (not ``read_only``) or a read-only reader. A refused read raises its typed
        error entering the block or at the first message."""
        ...

    async def close(self) -> None: ...


def library_message(type: str, payload: bytes, properties: Mapping[str, str]) -> MutableMessage:
    """The library's message for a caller's ``type`` (its wire name)."""
    kind = MessageType.from_wire(type)
    if kind is None:
        raise InvalidInputError(f"unknown message type {type!r}")
    return MutableMessage(kind, payload, properties=dict(properties))


def seen_of(msg: ImmutableMessage) -> Seen:
    return Seen(
        msg.message_id.to_bytes(),
        msg.time_tick,
        msg.type.wire_name,
        msg.payload,
        dict(msg.properties),
        msg.source,
    )


def seen_of_consumed(m: Consumed) -> Seen:
    return Seen(m.message_id, m.time_tick, m.type, m.payload, dict(m.properties), m.source_node_id)


# ---- the library (in-process backend, or Pulsar) ----------------------------------------


class _LibraryOwner:
    def __init__(self, wal: WAL, node: int) -> None:
        self.wal = wal
        self.node = node
        self.first_time_tick = wal.first_time_tick
        self.first_id = wal.first_message_id.to_bytes()

    async def append(
        self, payload: bytes, properties: Mapping[str, str] | None = None, type: str = "Insert"
    ) -> Acked:
        result = await self.wal.append(library_message(type, payload, properties or {}))
        return Acked(result.message_id.to_bytes(), result.time_tick)

    async def checkpoint(self, consumer: str, message_id: bytes, time_tick: int) -> None:
        await self.wal.checkpoint(consumer, self.wal.message_id_decoder(message_id), time_tick)

    async def truncate(self, retention_s: float) -> bytes | None:
        await self.wal.truncate(retention_s)
        point = (await self.wal.retention()).truncated_before
        return point.to_bytes() if point is not None else None

    async def truncate_to(self, message_id: bytes) -> bytes | None:
        used = await self.wal.truncate_to(self.wal.message_id_decoder(message_id))
        return used.to_bytes() if used is not None else None

    async def close(self) -> None:
        await self.wal.close()


class LibraryTarget:
    """``open_wal`` / ``open_read_only`` on one opener per node, all on one log store
    (the memory store, or the broker); every owner takes its timestamps from one
    counter, as every node of a cluster does from one TSO."""

    def __init__(self, name: str, openers: Sequence[BackendOpener], unique: str) -> None:
        self.name = name
        self.nodes = len(openers)
        self._openers = list(openers)
        self._unique = unique
        self._tso = CounterTSO()
        self._count = 0
        self._owners: list[_LibraryOwner] = []

    def channel(self, tag: str) -> str:
        self._count += 1
        return f"conf-{tag}-{self._unique}-{self._count}"

    def log_order(self, message_id: bytes) -> tuple[int, ...]:
        return self._openers[0].message_id_from_bytes(message_id).sort_key()

    async def open(self, channel: str, node: int) -> Owner:
        wal = await open_wal(
            self._openers[node], channel, BatchAllocator(self._tso), node + 1, fast_config()
        )
        owner = _LibraryOwner(wal, node)
        self._owners.append(owner)
        return owner

    def _owner_of(self, channel: str, node: int) -> _LibraryOwner:
        for owner in reversed(self._owners):
            if owner.wal.channel == channel and owner.node == node:
                return owner
        raise AssertionError(f"no owner of {channel} on node {node}")

    @contextlib.asynccontextmanager
    async def read(
        self, channel: str, where: Policy, *, node: int, read_only: bool
    ) -> AsyncIterator[AsyncIterator[Seen]]:
        opener = self._openers[node]
        delivery = _library_policy(opener, where)
        if read_only:
            async with await open_read_only(opener, channel, fast_config()) as reader:
                scanner = await reader.read(delivery)  # closed with its reader
                yield _seen(scanner)
        else:
            scanner = await self._owner_of(channel, node).wal.read(delivery)
            try:
                yield _seen(scanner)
            finally:
                await scanner.close()

    async def close(self) -> None:
        for owner in self._owners:
            await owner.close()
        for opener in self._openers:
            await opener.close()


def _library_policy(opener: BackendOpener, where: Policy) -> DeliveryPolicy:
    if where.kind == "all":
        return DeliveryPolicy.all()
    if where.kind == "latest":
        return DeliveryPolicy.latest()
    position = opener.message_id_from_bytes(where.id)
    if where.kind == "from":
        return DeliveryPolicy.start_from(position)
    return DeliveryPolicy.start_after(position)


async def _seen(scanner: Any) -> AsyncIterator[Seen]:
    async for msg in scanner:
        yield seen_of(msg)


# ---- node processes over gRPC -----------------------------------------------------------


class _NodeOwner:
    def __init__(
        self, client: NodeClient, channel: str, node: int, opened: pb.AssignChannelResponse
    ) -> None:
        self._client = client
        self._channel = channel
        self.node = node
        self.first_time_tick = opened.first_time_tick
        self.first_id = opened.first_message_id

    async def append(
        self, payload: bytes, properties: Mapping[str, str] | None = None, type: str = "Insert"
    ) -> Acked:
        acked = await self._client.produce(
            self._channel, payload, type=_node_type(type), properties=dict(properties or {})
        )
        return Acked(acked.message_id, acked.time_tick)

    async def checkpoint(self, consumer: str, message_id: bytes, time_tick: int) -> None:
        await self._client.checkpoint(self._channel, consumer, message_id, time_tick)

    async def truncate(self, retention_s: float) -> bytes | None:
        answer = await self._client.truncate(self._channel, retention_s)
        return bytes(answer.truncated_before) or None

    async def truncate_to(self, message_id: bytes) -> bytes | None:
        answer = await self._client.truncate(self._channel, up_to=message_id)
        return bytes(answer.truncated_through) or None

    async def close(self) -> None:
        """Idempotent, as the library's: a channel the node no longer holds (removed,
        or dropped once found fenced) is given up already."""
        with contextlib.suppress(ChannelNotFoundError):
            await self._client.remove(self._channel)


class NodeTarget:
    """Node processes (their gRPC addresses), one client each."""

    name = "node"

    def __init__(self, addresses: Sequence[str], unique: str) -> None:
        self.nodes = len(addresses)
        self._clients = [NodeClient(address, tracing=False) for address in addresses]
        self._unique = unique
        self._count = 0

    def channel(self, tag: str) -> str:
        self._count += 1
        return f"conf-{tag}-{self._unique}-{self._count}"

    def log_order(self, message_id: bytes) -> tuple[int, ...]:
        return PulsarMessageId.from_bytes(message_id).sort_key()

    async def open(self, channel: str, node: int) -> Owner:
        client = self._clients[node]
        return _NodeOwner(client, channel, node, await client.assign(channel))

    @contextlib.asynccontextmanager
    async def read(
        self, channel: str, where: Policy, *, node: int, read_only: bool
    ) -> AsyncIterator[AsyncIterator[Seen]]:
        stream = self._clients[node].consume(
            channel, _wire_policy(where), timeout=60, read_only=read_only
        )
        async with contextlib.aclosing(stream):
            yield _seen_consumed(stream)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._clients), return_exceptions=True)


def _node_type(type: str) -> str:
    """The node's produce name of a type (``Insert`` → ``insert``; it answers reads with
    the wire name): the one place the suite knows of the two vocabularies, which the
    verbatim message format replaces by the caller's own type, passed as it is."""
    return {"Insert": "insert", "Delete": "delete"}.get(type, type)


def _wire_policy(where: Policy) -> pb.DeliveryPolicy:
    if where.kind in ("all", "latest"):
        return policy(where.kind)
    return policy("start_from" if where.kind == "from" else "start_after", message_id=where.id)


async def _seen_consumed(stream: AsyncIterator[Consumed]) -> AsyncIterator[Seen]:
    async for m in stream:
        yield seen_of_consumed(m)
