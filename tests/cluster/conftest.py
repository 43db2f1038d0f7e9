"""The ``make_cluster`` fixture: clusters of real node processes, closed after the test.

A module names its clusters' channels and etcd prefix by overriding ``cluster_tag``, and
gives every cluster settings of its own by overriding ``cluster_defaults``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from streamwal.cluster.store import ClusterStore
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import ClusterFactory


@pytest.fixture
def cluster_tag() -> str:
    return "cl"


@pytest.fixture
async def store(stack: StackInfo) -> AsyncIterator[ClusterStore]:
    """A cluster store on the shared etcd, for tests that write the keys themselves."""
    async with ClusterStore([stack.etcd_endpoint]) as connected:
        yield connected


@pytest.fixture
def cluster_defaults() -> dict[str, Any]:
    return {}


@pytest.fixture
async def make_cluster(
    stack: StackInfo,
    tmp_path: Path,
    etcd_prefix: Callable[[str], str],
    unique: str,
    cluster_tag: str,
    cluster_defaults: dict[str, Any],
) -> AsyncIterator[ClusterFactory]:
    clusters = ClusterFactory(
        stack,
        tmp_path,
        lambda: etcd_prefix(cluster_tag),
        f"{cluster_tag}-{unique}",
        cluster_defaults,
    )
    yield clusters
    await clusters.close()
