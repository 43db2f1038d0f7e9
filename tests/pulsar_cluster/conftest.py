"""The cluster profile for the tests that need several brokers.

When a session collects such a test, the profile starts in the background as soon as
collection ends (about 30 s and 1.3 GB), so its start overlaps the tests that run
before; the fixture waits for it. A session that started the profile stops it again
at the end, and deletes the topics it created.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncIterator

import pytest

from streamwal_lab.stack import Stack
from streamwal_lab.stack.cluster import ClusterInfo
from streamwal_lab.stack.topics import delete_created, list_topics


class _Start:
    """``up`` of the cluster profile on a thread of its own."""

    def __init__(self) -> None:
        self.stack = Stack(profile="cluster")
        self.was_up = all(self.stack.running(name) for name in self.stack.services)
        self.info: ClusterInfo | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="cluster-profile-up", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.info = asyncio.run(self.stack.up_cluster())
        except BaseException as exc:  # reported by the fixture, in the test that needs it
            self.error = exc


_started: list[_Start] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("cluster") for item in session.items):
        _started.append(_Start())


@pytest.fixture(scope="session")
async def pulsar_cluster() -> AsyncIterator[ClusterInfo]:
    start = _started[0] if _started else _Start()
    await asyncio.to_thread(start.thread.join)
    if start.error is not None:
        raise start.error
    assert start.info is not None
    info = start.info
    before = await list_topics(info.admin_url)
    yield info
    try:
        deleted, created = await delete_created(info.admin_url, before)
        print(
            f"\ncluster: deleted {deleted} of the {created} topics this session created",
            file=sys.stderr,
        )
    finally:
        if not start.was_up:
            await start.stack.down()
