"""A channel's term in a cluster of real node processes: raised by one with each new
assignment, in etcd (``terms/<name>`` and the assignment), and the owner opens the
channel under it (``ListChannels``, ``channel status``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import pytest

from streamwal.cluster import ClusterClient
from streamwal.cluster.moving import move_channel
from streamwal.cluster.view import ClusterView
from streamwal.node.client import NodeClient
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster
from tests.etcd_keys import EtcdPrefixes
from tests.node.processes import streamwal_cli

pytestmark = pytest.mark.integration


@pytest.fixture
async def two(
    stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[TestCluster]:
    prefixes = EtcdPrefixes(stack.etcd_endpoint)
    channel = f"terms-{uuid.uuid4().hex[:8]}"
    cluster = TestCluster(stack, tmp_path_factory.mktemp("terms"), prefixes.new("terms"), [channel])
    try:
        await cluster.start(1, 2)
        await cluster.wait_all_serving()
        yield cluster
    finally:
        await cluster.close()
        await prefixes.delete_all()


async def _listed(cluster: TestCluster, node: int) -> list[tuple[str, bool, int]]:
    async with NodeClient(cluster.nodes[node].address) as client:
        return [(c.pchannel, c.fenced, c.term) for c in (await client.list_channels()).channels]


def _term_of(view: ClusterView, channel: str) -> tuple[int, int]:
    """The channel's term record (term, node); its assignment carries the same term."""
    record, _revision = view.terms[channel]
    assert view.assignments[channel].channel_term == record.term
    return record.term, record.node


async def test_the_term_rises_with_each_move(two: TestCluster, stack: StackInfo) -> None:
    [channel] = two.channels
    view = await two.wait_all_serving()
    owner = view.assignments[channel].node
    first, held_by = _term_of(view, channel)
    assert first >= 1 and held_by == owner
    assert await _listed(two, owner) == [(channel, False, first)]

    expected = first
    async with ClusterClient([stack.etcd_endpoint], key_prefix=two.prefix) as client:
        for _ in range(2):
            await client.produce(channel, b"before the move")
            target = 2 if owner == 1 else 1
            await move_channel(two.store, two.keys, channel, target, timeout_s=60)
            view = await two.wait_all_serving()
            expected += 1
            assert _term_of(view, channel) == (expected, target)
            assert await _listed(two, target) == [(channel, False, expected)]
            # the old owner let go of it: nothing kept there, fenced or not
            assert await _listed(two, owner) == []
            await client.produce(channel, b"after the move")
            owner = target

    status = await streamwal_cli(
        "channel", "status", channel, "--json", "--config", str(two.nodes[1].config_path)
    )
    assert status.returncode == 0, status
    shown = json.loads(status.stdout)
    assert (shown["term"], shown["term_node"]) == (expected, owner), shown
