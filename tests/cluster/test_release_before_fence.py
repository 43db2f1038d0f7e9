"""A channel moved between live nodes is fenced by its new owner only once the old
owner has closed it there and said so: a fence that meets the old owner's close of its
producer can deadlock the broker (docs/reliability.md). Two followers on the shared
etcd stand for the two nodes; their channel managers record when they open and close
a channel, and the old one takes its time to close."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import cast

import pytest

from streamwal.cluster.follower import Follower
from streamwal.cluster.records import (
    Assignment,
    ClusterKeys,
    NodeRecord,
    Release,
    decode,
    encode,
    now_ms,
)
from streamwal.cluster.store import ClusterStore
from streamwal.errors import ChannelNotFoundError, UnavailableError
from streamwal.node.channels import ChannelManager
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration

POLL_S = 0.05
CHANNEL = "moved"


class _Wal:
    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.is_fenced = False


class _Channels:
    """What a follower needs of a node's channel manager, with a log of its events."""

    def __init__(self, node: int, events: list[tuple[int, str, float]], close_s: float) -> None:
        self._node = node
        self._events = events
        self._close_s = close_s
        self._open: dict[str, _Wal] = {}
        self.fail_opens = 0
        #: channel -> when its first open began
        self.opened: dict[str, float] = {}

    def channels(self) -> list[_Wal]:
        return list(self._open.values())

    async def assign(self, channel: str, term: int | None = None) -> None:
        self._events.append((self._node, "open", time.monotonic()))
        self.opened.setdefault(channel, time.monotonic())
        if self.fail_opens:
            self.fail_opens -= 1
            raise UnavailableError("the broker did not answer (a test's)")
        self._open[channel] = _Wal(channel)

    async def remove(self, channel: str) -> None:
        # as the node's manager does: gone from the list first, then closed
        if self._open.pop(channel, None) is None:
            raise ChannelNotFoundError(channel)
        self._events.append((self._node, "closing", time.monotonic()))
        await asyncio.sleep(self._close_s)
        self._events.append((self._node, "closed", time.monotonic()))


class _Cluster:
    def __init__(self, store: ClusterStore, prefix: str) -> None:
        self.store = store
        self.keys = ClusterKeys(prefix)
        self.events: list[tuple[int, str, float]] = []
        self.followers: list[Follower] = []

    async def node(self, node: int, *, ready: bool = True) -> None:
        record = NodeRecord(node, f"127.0.0.1:{9000 + node}", "test", now_ms(), ready)
        await self.store.put(self.keys.node(node), encode(record))

    async def nodes(self, *nodes: int) -> None:
        for node in nodes:
            await self.node(node)

    async def follow(self, node: int, *, close_s: float = 0.0, grace_s: float = 5.0) -> _Channels:
        channels = _Channels(node, self.events, close_s)
        follower = Follower(
            self.store,
            self.keys,
            node,
            cast(ChannelManager, channels),
            interval_s=POLL_S,
            grace_s=grace_s,
        )
        self.followers.append(follower)
        await follower.start()
        return channels

    async def assign(self, node: int, previous: int | None, channel: str = CHANNEL) -> float:
        """Write the assignment as a balancer would; when it was written."""
        assignment = Assignment(channel, node, 1, "test", now_ms(), previous)
        await self.store.put(self.keys.assign + channel, encode(assignment))
        return time.monotonic()

    async def held_by(self, node: int) -> None:
        """The channel's first owner ``node``, once it has opened it."""
        await self.assign(node, None)
        await self.opened_on(node)

    async def move(self, node: int, previous: int) -> tuple[float, float]:
        """The channel moved from ``previous`` to ``node``: when the assignment was
        written, and when ``node`` began to open the channel."""
        moved_at = await self.assign(node, previous=previous)
        return moved_at, await self.opened_on(node)

    async def opened_on(self, node: int, within_s: float = 10.0, times: int = 1) -> float:
        """When ``node`` began its ``times``-th open of the channel."""
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            opens = [at for who, what, at in self.events if who == node and what == "open"]
            if len(opens) >= times:
                return opens[times - 1]
            await asyncio.sleep(0.01)
        raise AssertionError(f"node {node} did not open the channel {times}x: {self.events}")

    async def write_release(self, node: int) -> None:
        release = Release(CHANNEL, node, now_ms())
        await self.store.put(self.keys.released + CHANNEL, encode(release))

    def at(self, node: int, what: str) -> float:
        return next(at for who, w, at in self.events if who == node and w == what)

    async def release(self) -> Release | None:
        _, entries = await self.store.read_prefix(self.keys.released)
        found = [decode(Release, e.value) for e in entries if e.key.endswith("/" + CHANNEL)]
        return found[0] if found else None


@pytest.fixture
async def cluster(stack: StackInfo, etcd_prefix: Callable[[str], str]) -> AsyncIterator[_Cluster]:
    async with ClusterStore([stack.etcd_endpoint]) as store:
        made = _Cluster(store, etcd_prefix("release"))
        yield made
        for follower in made.followers:
            await follower.close()


async def test_the_new_owner_opens_only_after_the_old_owner_closed_and_said_so(
    cluster: _Cluster,
) -> None:
    await cluster.nodes(1, 2)
    await cluster.follow(1, close_s=0.5)
    await cluster.follow(2)
    await cluster.held_by(1)

    moved_at, opened_at = await cluster.move(2, previous=1)

    assert cluster.at(1, "closed") - cluster.at(1, "closing") >= 0.5
    assert opened_at > cluster.at(1, "closed"), cluster.events
    # the release ended the wait, not the 5 s bound
    assert opened_at - moved_at < 3.0
    release = await cluster.release()
    assert release is not None and release.node == 1


async def test_a_live_old_owner_that_says_nothing_is_waited_for_until_the_bound(
    cluster: _Cluster,
) -> None:
    # node 1 is live but follows nothing (hung, or a version that writes no release)
    await cluster.nodes(1, 2)
    await cluster.follow(2, grace_s=1.0)

    moved_at, opened_at = await cluster.move(2, previous=1)

    assert opened_at - moved_at >= 0.95
    assert opened_at - moved_at < 3.0


@pytest.mark.parametrize("old_owner", ["gone", "not ready"])
async def test_an_old_owner_gone_or_without_its_broker_is_not_waited_for(
    cluster: _Cluster, old_owner: str
) -> None:
    if old_owner == "not ready":
        await cluster.node(1, ready=False)
    await cluster.node(2)
    await cluster.follow(2, grace_s=5.0)

    moved_at, opened_at = await cluster.move(2, previous=1)

    assert opened_at - moved_at < 2.0


async def test_an_old_owner_that_never_held_the_channel_releases_it_at_once(
    cluster: _Cluster,
) -> None:
    # node 1 restarted after the channel was planned away from it: nothing to close
    await cluster.nodes(1, 2)
    await cluster.follow(1)
    await cluster.follow(2, grace_s=5.0)

    moved_at, opened_at = await cluster.move(2, previous=1)

    assert opened_at - moved_at < 2.0
    assert [e for e in cluster.events if e[0] == 1] == []
    release = await cluster.release()
    assert release is not None and release.node == 1


async def test_a_release_written_before_the_move_does_not_count(cluster: _Cluster) -> None:
    # node 1 released the channel after an earlier move away from it; that says
    # nothing about this one
    await cluster.nodes(1, 2)
    await cluster.write_release(1)
    await cluster.follow(2, grace_s=1.0)

    moved_at, opened_at = await cluster.move(2, previous=1)

    assert opened_at - moved_at >= 0.95


async def test_quick_moves_in_a_row_keep_the_order_of_close_and_fence(cluster: _Cluster) -> None:
    # 1 -> 2 -> 3 while node 1 still closes: node 2 never held the channel, but its
    # release waits for node 1's, so node 3 does not fence while node 1 closes
    await cluster.nodes(1, 2, 3)
    await cluster.follow(1, close_s=1.0)
    await cluster.follow(2)
    await cluster.follow(3)
    await cluster.held_by(1)

    await cluster.assign(2, previous=1)
    await asyncio.sleep(0.15)
    moved_at, opened_at = await cluster.move(3, previous=2)

    assert opened_at > cluster.at(1, "closed"), cluster.events
    assert opened_at - moved_at < 3.0
    assert [e for e in cluster.events if e[0] == 2] == []


async def test_an_open_that_failed_is_tried_again_without_waiting_again(cluster: _Cluster) -> None:
    await cluster.nodes(1, 2)
    channels = await cluster.follow(2, grace_s=1.0)
    channels.fail_opens = 1

    await cluster.assign(2, previous=1)
    first = await cluster.opened_on(2)
    second = await cluster.opened_on(2, times=2)

    # the retry comes after the follower's pause (1 s), not after another wait
    assert second - first < 1.8


async def test_a_slow_close_holds_up_no_other_channel_of_the_node(cluster: _Cluster) -> None:
    await cluster.nodes(1, 2)
    channels = await cluster.follow(1, close_s=3.0)
    await cluster.follow(2)
    await cluster.held_by(1)

    await cluster.assign(2, previous=1)
    await asyncio.sleep(0.3)  # node 1 is closing the moved channel now
    other_at = await cluster.assign(1, None, channel="other")
    deadline = time.monotonic() + 10
    while "other" not in channels.opened and time.monotonic() < deadline:
        await asyncio.sleep(0.01)

    # and the moved channel still waited for the slow close
    moved_opened_at = await cluster.opened_on(2)
    assert moved_opened_at > cluster.at(1, "closed")
    assert channels.opened["other"] - other_at < 1.0
    assert channels.opened["other"] < cluster.at(1, "closed")


@pytest.mark.parametrize("let_go_s", [0.0, 3.0])
async def test_a_follower_stopped_mid_close_finishes_it_and_releases_when_given_time(
    cluster: _Cluster, let_go_s: float
) -> None:
    # a node leaving (docs/deploy.md) stops following while a moved channel still closes
    await cluster.nodes(1, 2)
    await cluster.follow(1, close_s=1.0)
    await cluster.held_by(1)
    await cluster.assign(2, previous=1)
    deadline = time.monotonic() + 5.0
    while not any(what == "closing" for _, what, _ in cluster.events):
        assert time.monotonic() < deadline, cluster.events
        await asyncio.sleep(0.01)

    await cluster.followers[0].close(let_go_s)

    closed = any(who == 1 and what == "closed" for who, what, _ in cluster.events)
    release = await cluster.release()
    if let_go_s:
        assert closed, cluster.events
        assert release is not None and release.node == 1
    else:  # cut short, as before a leave: the new owner waits for the grace instead
        assert not closed, cluster.events
        assert release is None
