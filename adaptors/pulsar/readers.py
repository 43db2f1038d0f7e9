"""Readers of a Pulsar channel, one per delivery policy.

Every policy honours the truncation point: a read from (or after) a truncated message
is refused, and ``all`` starts at the first message that is not truncated, not at the
first entry the broker still has (the cursor keeps a truncated message's entry while
another message of it is kept, and the broker drops ledgers when it gets to it). That
first message is found by message id, skipping the truncated ones of the entry the
read opens at.
"""

from __future__ import annotations

from typing import Any

import pulsar
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.errors import translate
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.retention import TopicRetention
from streamwal.adaptors.pulsar.scanner import PulsarScanner, to_backend_message
from streamwal.adaptors.pulsar.state import ChannelState
from streamwal.errors import ClosedError, InvalidInputError, TruncatedError
from streamwal.timeouts import within
from streamwal.wal.backend import BackendMessage, DeliveryPolicy
from streamwal.wal.message_id import MessageId

__all__ = ["Readers"]


class Readers:
    """Opens scanners on the topic; closing the channel closes them."""

    def __init__(self, state: ChannelState, retention: TopicRetention) -> None:
        self._state = state
        self._retention = retention
        self._scanners: set[PulsarScanner] = set()

    async def close(self) -> None:
        for scanner in list(self._scanners):
            await scanner.close()
        self._scanners.clear()

    async def read(self, policy: DeliveryPolicy) -> PulsarScanner:
        self._state.check_open()
        scanner = await within(
            self._open_reader(policy), timeout=self._state.config.operation_timeout_s + 1
        )
        if self._state.closed:  # closed while the reader was being created: nobody else would
            await scanner.close()
            raise ClosedError(f"channel {self._state.channel!r} is closed")
        scanner.on_close = self._scanners.discard
        self._scanners.add(scanner)
        return scanner

    async def _open_reader(self, policy: DeliveryPolicy) -> PulsarScanner:
        if policy.kind == DeliveryPolicy.ALL:
            return await self._read_all()
        if policy.kind == DeliveryPolicy.LATEST:
            return PulsarScanner(await self._reader(pulsar.MessageId.latest), self._state.channel)
        if policy.kind not in (DeliveryPolicy.START_FROM, DeliveryPolicy.START_AFTER):
            raise InvalidInputError(f"the Pulsar backend cannot read from {policy}")
        start = policy.message_id
        if not isinstance(start, PulsarMessageId):
            raise InvalidInputError(f"{start!r} is not a Pulsar message id")
        truncated = await self._retention.truncation()
        if (
            truncated.covers(start)
            if policy.kind == DeliveryPolicy.START_FROM
            else truncated.covers_after(start)
        ):
            raise truncated.error(self._state.channel, start)
        # Open inclusive and check that the first entry is the one asked for: a
        # Pulsar reader silently moves to the next valid position otherwise.
        reader, first = await self._first_at(start.to_pulsar())
        in_pack = first is not None and _holds_pack_member(start, first.message_id)
        if start.batch_index >= 0 and (first is None or first.message_id != start):
            # A message of a pack is no Pulsar batch member: the client skips its entry
            # (it sorts before ``ledger:entry:index``), so read from the entry itself.
            await reader.close()
            reader, first = await self._first_at(
                PulsarMessageId(start.ledger, start.entry).to_pulsar()
            )
            in_pack = first is not None and _holds_pack_member(start, first.message_id)
            if not in_pack:  # not a pack there: as the first read found it
                await reader.close()
                reader, first = await self._first_at(start.to_pulsar())
        if first is None or (
            first.message_id != start
            and not in_pack
            and not (
                policy.kind == DeliveryPolicy.START_FROM and _starts_entry(start, first.message_id)
            )
        ):
            await reader.close()
            raise InvalidInputError(f"message id {start} is not in channel {self._state.channel!r}")
        # a position inside a pack: its whole entry, both ways (the WAL unpacks it and
        # leaves out the messages before the position)
        keep = first if policy.kind == DeliveryPolicy.START_FROM or in_pack else None
        return PulsarScanner(reader, self._state.channel, first=keep)

    async def _first_at(self, start: Any) -> tuple[Any, BackendMessage | None]:
        """A reader opened at ``start`` (inclusive) and the first entry it has (``None``:
        none yet); the reader is closed if this raises."""
        reader = await self._reader(start, inclusive=True)
        try:
            if not await reader.has_message_available():
                return reader, None
            return reader, to_backend_message(await reader.read_next())
        except PulsarException as exc:
            await reader.close()
            raise translate(exc, channel=self._state.channel, what="read") from exc
        except BaseException:
            await reader.close()
            raise

    async def _read_all(self) -> PulsarScanner:
        """From the first message not truncated: the reader opens at the entry of the
        furthest truncation point and drops the messages that point covers."""
        truncated = await self._retention.truncation()
        points = [p for p in (truncated.before, truncated.through) if p is not None]
        if not points:
            return PulsarScanner(await self._reader(pulsar.MessageId.earliest), self._state.channel)
        furthest = max(points)
        if not isinstance(furthest, PulsarMessageId):
            raise InvalidInputError(f"{furthest!r} is not a Pulsar message id")
        entry = PulsarMessageId(furthest.ledger, furthest.entry)
        reader = await self._reader(entry.to_pulsar(), inclusive=True)

        def drop(message_id: MessageId) -> bool:
            # a point inside a pack keeps the pack's entry (its later messages are not
            # truncated); the WAL leaves out the messages up to the point
            if furthest.batch_index >= 0 and message_id == entry:
                return False
            return truncated.covers(message_id)

        return PulsarScanner(reader, self._state.channel, drop=drop)

    async def locate(self, message_id: MessageId) -> None:
        """Return if ``message_id`` is a message of the topic (a read from it finds it)."""
        scanner = await within(
            self._open_reader(DeliveryPolicy.start_from(message_id)),
            timeout=self._state.config.operation_timeout_s + 1,
        )
        await scanner.close()

    async def message_before(self, message_id: MessageId) -> MessageId | None:
        """The last message before ``message_id`` still kept: the batch index before it,
        else the last message of the entry before (read, to see how many it holds)."""
        if not isinstance(message_id, PulsarMessageId):
            raise InvalidInputError(f"{message_id!r} is not a Pulsar message id")
        if message_id.batch_index > 0:
            return PulsarMessageId(message_id.ledger, message_id.entry, message_id.batch_index - 1)
        previous = await self._retention.entry_before(message_id.ledger, message_id.entry)
        if previous is None:
            return None
        try:
            scanner = await self._open_reader(DeliveryPolicy.start_from(PulsarMessageId(*previous)))
        except (TruncatedError, InvalidInputError):
            return None  # that entry is gone already
        last: MessageId | None = None
        try:
            while True:
                found = await within(anext(scanner), timeout=self._state.config.operation_timeout_s)
                if found.message_id >= message_id:
                    return last
                last = found.message_id
        finally:
            await scanner.close()

    async def _reader(self, start: Any, inclusive: bool = False) -> Any:
        try:
            return await self._state.client.create_reader(
                self._state.topic, start, start_message_id_inclusive=inclusive
            )
        except PulsarException as exc:
            raise translate(exc, channel=self._state.channel, what="create reader") from exc


def _starts_entry(start: PulsarMessageId, found: MessageId) -> bool:
    """``start`` names a whole entry (no batch index: the admin API's ids, such as
    :meth:`position_at`'s) and ``found`` is that entry's first message. A producer
    with batching writes ``ledger:entry:0``; reading from ``ledger:entry`` is reading
    from it (the rebuild after a restart read from the owner's first time tick so)."""
    return (
        isinstance(found, PulsarMessageId)
        and start.batch_index < 0
        and found.batch_index == 0
        and (found.ledger, found.entry) == (start.ledger, start.entry)
    )


def _holds_pack_member(start: PulsarMessageId, found: MessageId) -> bool:
    """``start`` names a message of a pack (log format v2: ``ledger:entry:index``) and
    ``found`` is the entry holding it, which Pulsar delivers whole (it is no Pulsar
    batch, so Pulsar's reader does not split it)."""
    return (
        isinstance(found, PulsarMessageId)
        and start.batch_index >= 0
        and found.batch_index < 0
        and (found.ledger, found.entry) == (start.ledger, start.entry)
    )
