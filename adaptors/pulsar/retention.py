"""Checkpoints and truncation on a Pulsar topic, through durable subscriptions.

The store: each registered consumer has a durable subscription of its own,
``streamwal-consumer-<name>``. Its cursor sits at the checkpoint's entry, so the broker
itself keeps everything the consumer still needs, whatever the WAL decides; its
properties hold the exact checkpoint (the message id, batch index included, and the
time tick), which the cursor alone cannot (it is entry-granular). Both live in the
broker's managed ledger, so a change of channel owner, or of node, loses nothing, and
the broker's subscription stats give each consumer's backlog for free.

Truncation moves the WAL's own cursor (:mod:`.cursor`): its properties record the
truncation point first, then the cursor is reset to it and the topic trimmed, so the
broker deletes every ledger that no cursor holds any more and that the namespace's
retention does not keep. Nothing else deletes. A truncate to an id records the last
message discarded (``streamwal.truncated_through``) beside the retention rounds' bound
(``streamwal.truncated_before``), and resets the cursor to that message's entry: the
entry stays until a later truncation passes it, so an entry is dropped only once all
its messages are.

Everything here goes through the admin API (the binary protocol cannot set
subscription properties, nor reset a cursor without connecting a consumer to it).
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.errors import (
    DecodeError,
    MisconfiguredError,
    QuotaExceededError,
    StreamwalError,
    UnavailableError,
)
from streamwal.wal.message_id import MessageId
from streamwal.wal.retention_contract import (
    Checkpoint,
    ConsumerState,
    RetentionState,
    TruncationPoint,
    validate_consumer_name,
)

__all__ = ["CONSUMER_PREFIX", "TopicRetention"]

CONSUMER_PREFIX = "streamwal-consumer-"
_ID = "streamwal.checkpoint.id"
_TIME_TICK = "streamwal.checkpoint.time_tick"
_TRUNCATED = "streamwal.truncated_before"
_THROUGH = "streamwal.truncated_through"


def _position(message_id: MessageId) -> dict[str, int]:
    """The cursor position that keeps ``message_id``'s entry (its whole batch)."""
    pid = _pulsar_id(message_id)
    return {"ledgerId": pid.ledger, "entryId": pid.entry}


def _pulsar_id(message_id: MessageId) -> PulsarMessageId:
    if not isinstance(message_id, PulsarMessageId):
        raise DecodeError(f"{message_id!r} is not a Pulsar message id")
    return message_id


def _point(props: dict[str, str]) -> TruncationPoint:
    def read(key: str) -> PulsarMessageId | None:
        raw = props.get(key)
        return PulsarMessageId.from_bytes(bytes.fromhex(raw)) if raw else None

    return TruncationPoint(read(_TRUNCATED), read(_THROUGH))


def _from_admin(answer: Any) -> PulsarMessageId | None:
    if not isinstance(answer, dict) or "ledgerId" not in answer:
        return None
    return PulsarMessageId(
        int(answer["ledgerId"]), int(answer["entryId"]), int(answer.get("batchIndex", -1))
    )


class TopicRetention:
    """:class:`~streamwal.wal.retention_contract.BackendRetention` for one topic."""

    def __init__(
        self, admin: PulsarAdmin | None, topic: str, channel: str, wal_cursor: str
    ) -> None:
        self._admin = admin
        self._path = PulsarAdmin.topic_path(topic)
        self._channel = channel
        self._wal_cursor_name = wal_cursor
        self._wal_cursor = urllib.parse.quote(wal_cursor, safe="")

    @property
    def admin(self) -> PulsarAdmin:
        if self._admin is None:
            raise MisconfiguredError(
                f"channel {self._channel!r}: checkpoints and truncation need the broker's "
                "admin API; set pulsar.admin_url"
            )
        return self._admin

    def _subscription(self, consumer: str) -> str:
        name = CONSUMER_PREFIX + validate_consumer_name(consumer)
        return f"{self._path}/subscription/{urllib.parse.quote(name, safe='')}"

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        point = await self.truncation()
        if point.covers_after(checkpoint.message_id):
            raise point.error(self._channel, checkpoint.message_id)
        subscription = self._subscription(checkpoint.consumer)
        position = _position(checkpoint.message_id)
        try:  # created at the checkpoint: it holds from there from the start
            await self.admin.put(subscription, position)
        except FileExistsError:
            pass
        # the exact checkpoint first, the cursor after it: a crash in between leaves the
        # cursor behind the checkpoint (holding more), never ahead of it
        await self.admin.put(
            f"{subscription}/properties",
            {_ID: checkpoint.message_id.to_bytes().hex(), _TIME_TICK: str(checkpoint.time_tick)},
        )
        await self.admin.post(f"{subscription}/resetcursor", position)

    async def remove_checkpoint(self, consumer: str) -> None:
        await self.admin.delete(self._subscription(consumer))

    async def retention_state(self) -> RetentionState:
        stats = await self.admin.get(f"{self._path}/stats")
        if not isinstance(stats, dict):
            return RetentionState()
        consumers = []
        truncated = TruncationPoint()
        for name, sub in (stats.get("subscriptions") or {}).items():
            props = sub.get("subscriptionProperties") or {}
            if name == self._wal_cursor_name:
                truncated = _point(props)
            if not name.startswith(CONSUMER_PREFIX) or _ID not in props:
                continue  # not ours, or created and not yet given its checkpoint
            checkpoint = Checkpoint(
                name.removeprefix(CONSUMER_PREFIX),
                PulsarMessageId.from_bytes(bytes.fromhex(props[_ID])),
                int(props[_TIME_TICK]),
            )
            consumers.append(
                ConsumerState(checkpoint, sub.get("msgBacklog"), sub.get("backlogSize"))
            )
        consumers.sort(key=lambda c: c.checkpoint.consumer)
        return RetentionState(
            truncated.before, stats.get("storageSize"), consumers, truncated.through
        )

    async def truncation_point(self) -> PulsarMessageId | None:
        """Where a reader of the raw log (``streamwal verify``) finds it whole: the
        retention rounds' point, or the entry of the last message a truncate to an id
        discarded (kept while its entry is), whichever is further; ``None``: never
        truncated."""
        point = await self.truncation()
        found = [_pulsar_id(point.before)] if point.before is not None else []
        if point.through is not None:
            through = _pulsar_id(point.through)
            found.append(PulsarMessageId(through.ledger, through.entry))
        return max(found) if found else None

    async def truncation(self) -> TruncationPoint:
        """What the recorded truncations discarded; nothing without an admin API (then
        nothing can have been truncated through it either)."""
        if self._admin is None:
            return TruncationPoint()
        return _point(await self._cursor_properties())

    async def _cursor_properties(self) -> dict[str, str]:
        cursor = f"{self._path}/subscription/{self._wal_cursor}/properties"
        props = await self.admin.get(cursor)
        return dict(props) if isinstance(props, dict) else {}

    async def position_at(self, publish_time_ms: int) -> MessageId | None:
        found, first, last = await asyncio.gather(
            self.admin.get(f"{self._path}/messageid/{int(publish_time_ms)}"),
            self.admin.get(f"{self._path}/messageid/0"),
            self.admin.get(f"{self._path}/lastMessageId"),
        )
        position, start, end = _from_admin(found), _from_admin(first), _from_admin(last)
        if position is None or start is None or end is None or end.entry < 0:
            return None  # no topic, or nothing in it
        if position <= start:
            return None  # nothing older than the time
        entry_of_last = PulsarMessageId(end.ledger, end.entry)
        return entry_of_last if position > entry_of_last else position

    async def explain_quota(self, error: QuotaExceededError) -> QuotaExceededError:
        """Name the quota that blocks the producer and the subscription holding the
        largest backlog (the WAL's own cursor means: nothing truncates the channel)."""
        if self._admin is None:
            return error
        try:
            quotas, stats = await asyncio.gather(
                self._admin.get(f"{self._path}/backlogQuotaMap?applied=true"),
                self._admin.get(f"{self._path}/stats"),
            )
        except (StreamwalError, FileExistsError):
            return error
        limits = [
            f"{kind} ({q.get('limitSize', -1)} bytes, {q.get('limitTime', -1)} s: "
            f"{q.get('policy')})"
            for kind, q in (quotas or {}).items()
            if isinstance(q, dict)
            and (int(q.get("limitSize", -1)) >= 0 or int(q.get("limitTime", -1)) >= 0)
        ]
        subscriptions = (stats or {}).get("subscriptions") or {}
        holders = sorted(
            subscriptions.items(), key=lambda kv: int(kv[1].get("backlogSize") or 0), reverse=True
        )
        held = ""
        if holders:
            name, sub = holders[0]
            held = f"; the largest backlog is {name!r}'s: {sub.get('msgBacklog')} messages, "
            held += f"{sub.get('backlogSize')} bytes"
            if name == self._wal_cursor_name:
                held += " (the WAL's own cursor: set wal.retention so the channel is truncated)"
            elif name.startswith(CONSUMER_PREFIX):
                consumer = name.removeprefix(CONSUMER_PREFIX)
                held += f" (consumer {consumer!r} must checkpoint further)"
        quota = ", ".join(limits) or "a backlog quota"
        return QuotaExceededError(f"{error}: quota {quota}{held}", error.outcome)

    async def truncate(self, before: MessageId) -> None:
        await self._record_and_trim(_TRUNCATED, before)

    async def truncate_through(self, through: MessageId) -> None:
        await self._record_and_trim(_THROUGH, through)

    async def _record_and_trim(self, key: str, point: MessageId) -> None:
        """Record ``point`` under ``key`` (the properties are replaced whole: the other
        kind's point is kept), then move the cursor to its entry and trim."""
        cursor = f"{self._path}/subscription/{self._wal_cursor}"
        props = await self._cursor_properties()
        props[key] = point.to_bytes().hex()
        await self.admin.put(f"{cursor}/properties", props)
        await self.admin.post(f"{cursor}/resetcursor", _position(point))
        try:
            await self.admin.post(f"{self._path}/trim")
        except UnavailableError:
            pass  # the broker's own retention check deletes the ledgers later

    async def entry_before(self, ledger: int, entry: int) -> tuple[int, int] | None:
        """The entry before ``ledger:entry`` in the topic's ledgers; ``None`` if none."""
        if entry > 0:
            return ledger, entry - 1
        internal = await self.admin.get(f"{self._path}/internalStats")
        ledgers = (internal or {}).get("ledgers") or []
        earlier = [
            (int(item["ledgerId"]), int(item.get("entries") or 0))
            for item in ledgers
            if int(item["ledgerId"]) < ledger and int(item.get("entries") or 0) > 0
        ]
        if not earlier:
            return None
        last_ledger, entries = max(earlier)
        return last_ledger, entries - 1
