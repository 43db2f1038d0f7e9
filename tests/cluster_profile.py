"""The cluster profile for the tests that need several brokers (a pytest plugin of the
suite, so that tests anywhere can ask for ``pulsar_cluster``).

The fixture is per module: a module that needs the profile starts what of it is not
up (about 20 s and 1.3 GB), and stops again, after its last test, only what it
started, so five idle JVMs do not slow the rest of the suite and a cluster someone
else started stays up. Topics a module created are deleted.
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
    stopped = [name for name in stack.services if stack.running(name) is None]
    try:
        info = await stack.up_cluster()
        before = await list_topics(info.admin_url)
        yield info
        try:
            deleted, created = await delete_created(info.admin_url, before)
        except (OSError, RuntimeError) as exc:  # the cluster is gone: nothing to tidy
            print(f"\ncluster: could not delete these tests' topics: {exc}", file=sys.stderr)
        else:
            print(
                f"\ncluster: deleted {deleted} of the {created} topics these tests created",
                file=sys.stderr,
            )
    finally:
        if stopped:
            await stack.down(stopped)
