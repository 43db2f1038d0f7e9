"""Reading a channel's topic for ``streamwal verify``: a plain Pulsar reader (not
the WAL, so a WAL bug cannot hide itself), one entry at a time, up to the topic's end
as the read goes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypedDict, Unpack

import pulsar

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.adaptors.pulsar.opener import client_logger
from streamwal.errors import UnavailableError
from streamwal.wal.backend import BackendMessage

__all__ = ["RECEIVER_QUEUE", "ReadOptions", "iter_entries", "iter_topic"]

#: the reader's receiver queue, in messages: small, because the C++ client bounds a
#: reader's memory by nothing else, and a chunked message's records are entries of up
#: to the broker's 5 MiB each (32 of them: 160 MiB at most). It costs the reading
#: process more flow requests than the client's default of 1,000 (about 1.5 us of CPU
#: an entry), the price of that bound
RECEIVER_QUEUE = 32
_NOTHING = (-1, -1, -1)  # before every (ledger, entry, batch index)
_EMPTY_LOOK_MS = 500


class ReadOptions(TypedDict, total=False):
    """:func:`iter_entries`'s keywords (defaults there), which :func:`iter_topic` passes
    on: where the read starts and how long it waits for an entry."""

    start: PulsarMessageId | None
    inclusive: bool
    since_ms: int | None
    timeout: float


def iter_topic(
    service_url: str, topic: str, **options: Unpack[ReadOptions]
) -> Iterator[BackendMessage]:
    """Every entry of ``topic`` from the earliest (or after ``start``, or at it when
    ``inclusive``, or from the first published at ``since_ms`` or later) up to its end
    as the read goes, one at a time: nothing is held but the receiver queue.

    A blocking reader (the synchronous client: one call per entry, no event-loop
    round trip); run it in a thread from async code. Raises
    :class:`UnavailableError` when the broker fails, :class:`TimeoutError` when an
    entry it announced does not come."""
    for key, payload, properties in iter_entries(service_url, topic, **options):
        yield BackendMessage(PulsarMessageId(*key), payload, properties)


def iter_entries(
    service_url: str,
    topic: str,
    *,
    start: PulsarMessageId | None = None,
    inclusive: bool = False,
    since_ms: int | None = None,
    timeout: float = 30.0,
) -> Iterator[tuple[tuple[int, int, int], bytes, dict[str, str]]]:
    """:func:`iter_topic`'s entries in parts: (ledger, entry, batch index), payload,
    properties; what a reader that builds no object per entry reads."""
    try:
        client = pulsar.Client(
            service_url, operation_timeout_seconds=int(timeout), logger=client_logger()
        )
    except pulsar.PulsarException as exc:
        raise UnavailableError(f"cannot reach {service_url}: {exc}") from exc
    try:
        first = start.to_pulsar() if start is not None else pulsar.MessageId.earliest
        reader = client.create_reader(
            topic,
            first,
            receiver_queue_size=RECEIVER_QUEUE,
            start_message_id_inclusive=inclusive,
        )
        if since_ms is not None:
            reader.seek(since_ms)
        wait_ms = int(timeout * 1000)
        # up to the last entry as the read starts without asking the broker for each
        # (has_message_available costs more than a read); then ask, for what came since
        end = _last_key(client, topic, wait_ms)
        key = _start_key(start, inclusive, since_ms, end)
        available = reader.has_message_available
        # the C extension's reader when the client has one: the Python wrapper makes a
        # Message object per entry and adds a call per field (about a microsecond)
        read_next = getattr(getattr(reader, "_reader", None), "read_next", reader.read_next)
        while key < end or available():
            try:
                message = read_next(wait_ms)
            except pulsar.Timeout:
                if not available():
                    break  # a start that skipped past the last entry
                raise TimeoutError(f"{topic}: no entry within {timeout} s") from None
            at = message.message_id()
            key = (at.ledger_id(), at.entry_id(), at.batch_index())
            yield key, message.data(), message.properties()
        reader.close()
    except pulsar.PulsarException as exc:
        raise UnavailableError(f"reading {topic}: {exc}") from exc
    finally:
        client.close()


def _start_key(
    start: PulsarMessageId | None, inclusive: bool, since_ms: int | None, end: tuple[int, int, int]
) -> tuple[int, int, int]:
    """Where the reader stands before its first read, as (ledger, entry, batch index):
    before everything for a read from the earliest, just before or at ``start``;
    unknown after a seek by time (``end``: has_message_available decides)."""
    if since_ms is not None:
        return end
    if start is None:
        return _NOTHING
    return (start.ledger, start.entry, start.batch_index - 1 if inclusive else start.batch_index)


def _last_key(client: Any, topic: str, wait_ms: int) -> tuple[int, int, int]:
    """The (ledger, entry, batch index) of ``topic``'s last message, by a reader that
    starts at the latest inclusively; ``(-1, -1, -1)`` for an empty topic."""
    tail = client.create_reader(topic, pulsar.MessageId.latest, start_message_id_inclusive=True)
    try:
        # a reader just made can answer "nothing" before it knows: a short look anyway
        wait = wait_ms if tail.has_message_available() else _EMPTY_LOOK_MS
        at = tail.read_next(wait).message_id()
        return (at.ledger_id(), at.entry_id(), at.batch_index())
    except pulsar.Timeout:
        return _NOTHING  # empty: the reader's own has_message_available decides
    finally:
        tail.close()
