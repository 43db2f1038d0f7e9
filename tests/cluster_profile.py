"""The cluster profile for the tests that need several brokers (a pytest plugin of the
suite, so that tests anywhere can ask for ``pulsar_cluster``).

The fixture is per module: a module that needs the profile starts it if it is not up
(about 20 s and 1.3 GB), and stops it again after its last test if it started it, so
five idle JVMs do not slow the rest of the suite. Topics a module created are deleted.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest

from streamwal_lab.stack import Stack
from streamwal_lab.stack.cluster import ClusterInfo
from streamwal_lab.stack.topics import delete_created, list_topics


@pytest.fixture(scope="module")
async def pulsar_cluster() -> AsyncIterator[ClusterInfo]:
    stack = Stack(profile="cluster")
    was_up = all(stack.running(name) for name in stack.services)
    try:
        info = await stack.up_cluster()
        before = await list_topics(info.admin_url)
        yield info
        deleted, created = await delete_created(info.admin_url, before)
        print(
            f"\ncluster: deleted {deleted} of the {created} topics these tests created",
            file=sys.stderr,
        )
    finally:
        if not was_up:
            await stack.down()
