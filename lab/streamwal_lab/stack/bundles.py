"""Moving a topic between the brokers of a cluster, as load shedding and operators do.

A topic belongs to a bundle of its namespace, and a broker owns whole bundles; an
unload with a destination closes the bundle's topics on their broker and hands the
bundle to the named one, whose clients then reconnect there.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse

from streamwal.adaptors.pulsar.admin import PulsarAdmin

__all__ = ["MoveError", "bundle_of", "move_topic", "owner_of"]


class MoveError(RuntimeError):
    """The cluster did not place the topic on the broker asked for in time."""


def _broker_id(http_url: str) -> str:
    """``http://127.0.0.1:18081`` → ``127.0.0.1:18081``, the id the cluster uses."""
    return urllib.parse.urlsplit(http_url).netloc


async def owner_of(admin: PulsarAdmin, topic: str) -> str:
    """The id of the broker serving ``topic`` (placing it if nobody does)."""
    found = await admin.lookup(topic)
    if not found or "httpUrl" not in found:
        raise MoveError(f"no broker serves {topic}: lookup answered {found!r}")
    return _broker_id(found["httpUrl"])


async def bundle_of(admin: PulsarAdmin, topic: str) -> str:
    """``0x00000000_0x10000000``: the bundle of its namespace ``topic`` falls in."""
    answer = await admin.bundle(topic)
    if not answer or "_" not in answer:
        raise MoveError(f"no bundle for {topic}: {answer!r}")
    return answer


async def move_topic(
    admin: PulsarAdmin,
    topic: str,
    to: str,
    *,
    namespace: str = "public/default",
    timeout: float = 30.0,
) -> float:
    """Unload ``topic``'s bundle onto broker ``to``; returns the seconds until the
    cluster's lookup names ``to`` as the owner.

    A broker that has just started is not known to the load manager until its first
    load report, and a bundle unloaded towards it lands elsewhere: unloaded again
    (towards ``to``) until it lands there."""
    started = time.monotonic()
    bundle = await bundle_of(admin, topic)
    while True:
        await admin.put(f"namespaces/{namespace}/{bundle}/unload?destinationBroker={to}")
        settle = time.monotonic() + _SETTLE_S
        while True:
            now = await owner_of(admin, topic)
            if now == to:
                return time.monotonic() - started
            if time.monotonic() >= settle:
                break
            await asyncio.sleep(0.1)
        if time.monotonic() - started > timeout:
            raise MoveError(f"{topic} is on {now}, not {to}, {timeout:.0f}s after its move")


#: seconds an unload is given to land its bundle on the broker asked for
_SETTLE_S = 3.0
