"""Listing and deleting topics through the broker's admin API, for runs that clean up.

The local broker keeps every topic for ever (a WAL's log must outlive its readers),
and a standalone broker loads every topic of its namespace when it starts: topics a
test session or a benchmark leaves behind make every later start slower and every
idle minute busier (thousands of topics kept two cores busy). Runs that create
throw-away topics therefore delete them when they end.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import StreamwalError
from streamwal_lab.stack.process import is_alive

__all__ = ["SharedCleanup", "delete_created", "delete_topics", "list_topics"]

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


class SharedCleanup:
    """Runs that share one broker tidy up together: the last one out deletes the topics
    created since the first one came in.

    A run that deleted "every topic created since I started" on its own took the topics
    of another run still going on the same stack: a topic is only refused deletion while
    a producer or reader is attached, and a channel between owners (a failover, a
    takeover) has none for a moment. Each run registers under ``folder`` (its pid); the
    first one in records the broker's topics; a run that leaves while others are live
    deletes nothing. A run that died without leaving is recognised by its pid and
    dropped.
    """

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._me = folder / f"run-{os.getpid()}"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._folder.mkdir(parents=True, exist_ok=True)
        with open(self._folder / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _others(self) -> list[Path]:
        live = []
        for run in self._folder.glob("run-*"):
            if run == self._me:
                continue
            if is_alive(int(run.name.removeprefix("run-"))):
                live.append(run)
            else:
                run.unlink(missing_ok=True)
        return live

    def enter(self, topics: set[str]) -> None:
        """Register this run; ``topics`` (the broker's now) is the baseline if no other
        run is live."""
        with self._locked():
            baseline = self._folder / "baseline.json"
            if not self._others() or not baseline.exists():
                baseline.write_text(json.dumps(sorted(topics)))
            self._me.touch()

    def leave(self) -> set[str] | None:
        """Unregister this run: the baseline to delete against if it was the last one
        out, else None (a live run's topics are not this run's to delete)."""
        with self._locked():
            self._me.unlink(missing_ok=True)
            if self._others():
                return None
            baseline = self._folder / "baseline.json"
            try:
                return set(json.loads(baseline.read_text()))
            except FileNotFoundError:
                return None
            finally:
                baseline.unlink(missing_ok=True)
