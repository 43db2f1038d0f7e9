"""Listing and deleting topics through the broker's admin API, for runs that clean up.

The local broker keeps every topic for ever (a WAL's log must outlive its readers),
and a standalone broker loads every topic of its namespace when it starts: topics a
test session or a benchmark leaves behind make every later start slower and every
idle minute busier (thousands of topics kept two cores busy). Runs that create
throw-away topics therefore delete them when they end.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable, Iterable

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import StreamwalError

__all__ = ["delete_created", "delete_topics", "list_topics"]

_NAMESPACE = "public/default"


def _get_json(url: str, timeout: float) -> object:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read())


async def list_topics(admin_url: str, namespace: str = _NAMESPACE, timeout: float = 30) -> set[str]:
    """Full names (``persistent://tenant/ns/topic``) of the namespace's persistent topics."""
    url = f"{admin_url.rstrip('/')}/admin/v2/persistent/{namespace}"
    found = await asyncio.to_thread(_get_json, url, timeout)
    if not isinstance(found, list):
        raise RuntimeError(f"unexpected answer from {url}: {found!r}")
    return {str(name) for name in found}


async def delete_topics(
    admin_url: str, topics: Iterable[str], *, parallel: int = 8, timeout: float = 30
) -> int:
    """Delete ``topics`` (full names) that nobody uses any more; returns how many went.

    Deletion is not forced: a topic with a producer or reader attached (a node still
    serving it) is left alone.
    """
    # through the client that follows a redirect to the topic's owner for every
    # method: on a cluster, the broker asked is often not the one serving the topic
    admin = PulsarAdmin(admin_url, timeout=timeout)
    gate = asyncio.Semaphore(parallel)

    async def one(topic: str) -> bool:
        async with gate:
            try:
                await admin.delete(PulsarAdmin.topic_path(topic))
            except (StreamwalError, FileExistsError):
                return False  # in use (a producer or reader is still attached), or
                # the broker went away: nothing to clean up now
            return True

    results = await asyncio.gather(*(one(t) for t in topics))
    return sum(results)


async def delete_created(
    admin_url: str, before: set[str], which: Callable[[str], bool] = lambda _: True
) -> tuple[int, int]:
    """Delete the topics that appeared since ``before`` was listed and that ``which``
    accepts; returns (deleted, created)."""
    created = {t for t in await list_topics(admin_url) - before if which(t)}
    return await delete_topics(admin_url, created), len(created)
