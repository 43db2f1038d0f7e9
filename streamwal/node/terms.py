"""A channel's term (Milvus's ``PChannelInfo.Term``): who may open it for writing now.

Each open of a channel for writing carries a term, per channel, separate from a
cluster balancer's own term. The rule (:func:`next_term`): a term below the channel's
current one is refused (:class:`~streamwal.errors.StaleTermError`); the current term
is accepted again from the node that holds it (Milvus's framework reopens with an
equal term and expects success) and refused from any other; a higher one is taken;
none asked means the current one plus one. The rule only refuses an open that would
fence a newer owner: the broker's fence (ExclusiveWithFencing) stays what keeps two
writers out of one log.

Where the current term lives: a standalone node keeps it in etcd under its prefix
(``<tso.key_prefix>/terms/<channel>``, :class:`EtcdTerms`), so another node that
opens the channel later sees it; a cluster keeps it with its channel records and the
node only checks what it holds itself (:mod:`streamwal.cluster.balancer`).
:class:`MemoryTerms` is the same store in one process.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from typing import Protocol

from streamwal.errors import DecodeError, InvalidInputError, StaleTermError, UnavailableError
from streamwal.lifecycle import Startable
from streamwal.tso.config import EtcdConfig
from streamwal.tso.etcd_store import EtcdStore

__all__ = [
    "ChannelTerm",
    "ChannelTerms",
    "EtcdTerms",
    "MemoryTerms",
    "check_term",
    "decode_term",
    "encode_term",
    "next_term",
    "terms_root",
]

#: how many times a claim reads and writes again after another node's claim won
_CLAIM_TRIES = 20


@dataclass(frozen=True)
class ChannelTerm:
    """A channel's current term and the node that opened it under that term."""

    channel: str
    term: int
    node: int
    at_ms: int = 0


def check_term(term: object) -> int:
    """``term`` as a term: an int of 0 or more, else :class:`InvalidInputError`."""
    if not isinstance(term, int) or isinstance(term, bool) or term < 0:
        raise InvalidInputError(f"a term is a whole number of 0 or more, got {term!r}")
    return term


def next_term(channel: str, current: ChannelTerm | None, node: int, asked: int | None) -> int:
    """The term ``node`` opens ``channel`` under when it asks for ``asked`` (``None``:
    the next one), or :class:`StaleTermError` (see the module docstring)."""
    held = 0 if current is None else current.term
    if asked is None:
        return held + 1
    check_term(asked)
    if asked > held or current is None or (asked == held and current.node == node):
        return asked
    raise StaleTermError(channel, asked, held, current.node)


def encode_term(record: ChannelTerm) -> bytes:
    return json.dumps(asdict(record), sort_keys=True).encode()


def decode_term(raw: bytes) -> ChannelTerm:
    """:class:`DecodeError` for a value no node wrote."""
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        record = ChannelTerm(**data)
        check_term(record.term)
        return record
    except (ValueError, TypeError) as exc:
        raise DecodeError(f"not a channel term: {raw[:80]!r} ({exc})") from None


def terms_root(key_prefix: str) -> str:
    """Where a standalone node's terms live in etcd: ``<key_prefix>/terms/``."""
    return f"{key_prefix.rstrip('/')}/terms/"


class ChannelTerms(Protocol):
    """Where channels' current terms are kept, shared by the nodes that open them."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def claim(self, channel: str, node: int, asked: int | None) -> int:
        """Record ``node`` as the holder of ``channel`` under the term :func:`next_term`
        gives, atomically with the read it was decided from; that term."""
        ...

    async def read(self, channel: str) -> ChannelTerm | None: ...


class MemoryTerms:
    """:class:`ChannelTerms` in one process (tests, several nodes in one process)."""

    def __init__(self) -> None:
        self._terms: dict[str, ChannelTerm] = {}
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def claim(self, channel: str, node: int, asked: int | None) -> int:
        async with self._lock:
            term = next_term(channel, self._terms.get(channel), node, asked)
            self._terms[channel] = ChannelTerm(channel, term, node, _now_ms())
            return term

    async def read(self, channel: str) -> ChannelTerm | None:
        return self._terms.get(channel)


class EtcdTerms(Startable):
    """:class:`ChannelTerms` in etcd, one key per channel under :func:`terms_root`.

    A claim reads the key and writes it back only if nobody wrote it meanwhile (etcd's
    mod revision), so two nodes claiming at once never both win the same term. etcd
    not answering fails the open (:class:`~streamwal.errors.UnavailableError`): opening
    without knowing the term could fence a newer owner.
    """

    def __init__(self, etcd: EtcdConfig, key_prefix: str, *, timeout_s: float = 5.0) -> None:
        self._store = EtcdStore.from_etcd(
            etcd, request_timeout_s=min(1.0, timeout_s), unavailable_after_s=timeout_s
        )
        self._root = terms_root(key_prefix)

    def key(self, channel: str) -> str:
        return self._root + channel

    async def start(self) -> None:
        await self._store.start()

    async def close(self) -> None:
        await self._store.close()

    async def claim(self, channel: str, node: int, asked: int | None) -> int:
        key = self.key(channel)
        for _ in range(_CLAIM_TRIES):
            raw, revision = await self._store.read_revision(key)
            current = None if raw is None else decode_term(raw)
            term = next_term(channel, current, node, asked)
            if current is not None and current.term == term and current.node == node:
                return term  # this node holds it already: nothing to write
            record = ChannelTerm(channel, term, node, _now_ms())
            if await self._store.put_if(key, encode_term(record), revision):
                return term
        raise UnavailableError(
            f"channel {channel!r}: its term in etcd kept changing under {_CLAIM_TRIES} claims"
        )

    async def read(self, channel: str) -> ChannelTerm | None:
        raw, _revision = await self._store.read_revision(self.key(channel))
        return None if raw is None else decode_term(raw)

    async def served_by(self, channel: str) -> str | None:
        """A term does not say who serves the channel now (the broker's check of its
        topic does): never a refusal (:class:`~streamwal.wal.deletion.ChannelRecords`)."""
        return None

    async def delete_channel_keys(self, channel: str) -> int:
        """Forget ``channel``'s term, as the channel is deleted: 1 if it had one."""
        return 1 if await self._store.delete(self.key(channel)) else 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
