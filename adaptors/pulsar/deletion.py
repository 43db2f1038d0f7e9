"""Deleting a channel's topic with its subscriptions, through the admin API.

The delete is not forced: the broker refuses it while a producer or consumer (a
reader too) is attached, which is what keeps a delete from pulling the log from under
a node that serves the channel. The topic's stats are read first, so a channel in use
is refused with who holds it, and so a missing topic is told apart without a lookup
(the broker creates a topic a client looks up). Deleting the topic deletes its
subscriptions (the WAL's cursor with the truncation point, each consumer's
checkpoint): they live in its managed ledger.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from streamwal.adaptors.pulsar.admin import AdminRefusedError, PulsarAdmin
from streamwal.errors import ChannelInUseError

__all__ = ["delete_topic"]

#: how long a refusal is tried again after the stats showed nobody attached: a producer
#: just closed can still be counted for a moment
_SETTLE_S = 10.0
_PAUSE_S = 0.5


def _holders(stats: dict[str, Any]) -> list[str]:
    """Who is attached to the topic, for the refusal's text."""
    found = [f"producer {p.get('producerName', '?')}" for p in stats.get("publishers") or []]
    for name, sub in (stats.get("subscriptions") or {}).items():
        for consumer in sub.get("consumers") or []:
            kind = "reader" if sub.get("isDurable") is False else "consumer"
            found.append(f"{kind} {consumer.get('consumerName') or name}")
    return found


async def delete_topic(admin: PulsarAdmin, topic: str, channel: str) -> int | None:
    """Delete ``topic`` (``channel``'s); how many durable subscriptions it had, ``None``
    when there is no such topic. :class:`ChannelInUseError` while anyone is attached."""
    path = PulsarAdmin.topic_path(topic)
    deadline = time.monotonic() + _SETTLE_S
    while True:
        stats = await admin.get(f"{path}/stats")
        if not isinstance(stats, dict):
            return None
        holders = _holders(stats)
        if holders:
            raise ChannelInUseError(channel, f"attached to its topic: {', '.join(holders)}")
        durable = [
            name
            for name, sub in (stats.get("subscriptions") or {}).items()
            if sub.get("isDurable", True)
        ]
        try:
            await admin.delete(path)
        except AdminRefusedError as exc:
            if time.monotonic() > deadline:
                raise ChannelInUseError(channel, f"the broker refused: {exc}") from None
            await asyncio.sleep(_PAUSE_S)
            continue
        return len(durable)
