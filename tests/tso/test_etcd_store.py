"""The etcd transactions the election and the oracle rely on, on a real etcd."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from streamwal.errors import NotLeaderError, TimestampRegressionError
from streamwal.tso.etcd_store import EtcdStore
from streamwal.tso.store import LeaderRecord, decode_window

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(etcd_endpoint: str) -> AsyncIterator[EtcdStore]:
    async with EtcdStore([etcd_endpoint], request_timeout_s=2.0) as s:
        yield s


async def test_create_if_absent_elects_exactly_one(store: EtcdStore, tso_prefix: str) -> None:
    key = f"{tso_prefix}/leader"
    me = LeaderRecord("me", "a:1").encode()
    other = LeaderRecord("other", "b:2").encode()
    lease_a, ttl = await store.grant_lease(5)
    lease_b, _ = await store.grant_lease(5)
    assert ttl >= 5
    assert await store.create_if_absent(key, me, lease_a) == (True, me)
    assert await store.create_if_absent(key, other, lease_b) == (False, me)
    # A retry of the winning request (same value and lease) still counts as won.
    assert await store.create_if_absent(key, me, lease_a) == (True, me)
    await store.revoke_lease(lease_a)
    assert await store.get(key) is None  # the key went with its lease
    assert await store.refresh_lease(lease_a) == 0
    await store.revoke_lease(lease_a)  # already gone: not an error
    assert await store.create_if_absent(key, other, lease_b) == (True, other)
    await store.revoke_lease(lease_b)


async def test_save_window_is_fenced_by_leader_and_growth(
    store: EtcdStore, tso_prefix: str
) -> None:
    leader_key, ts_key = f"{tso_prefix}/leader", f"{tso_prefix}/timestamp"
    me = LeaderRecord("me", "a:1").encode()
    lease, _ = await store.grant_lease(5)
    assert (await store.create_if_absent(leader_key, me, lease))[0]

    async def save(window: int, previous: int | None, value: bytes = me) -> None:
        await store.save_window(
            ts_key, window, previous_ms=previous, leader_key=leader_key, leader_value=value
        )

    await save(1_000, None)
    with pytest.raises(TimestampRegressionError):
        await save(2_000, None)  # "absent" expected, but it exists
    await save(2_000, 1_000)
    await save(2_000, 1_000)  # the same value again: a retried save, accepted
    with pytest.raises(TimestampRegressionError):
        await save(1_500, 2_000)  # never shrinks
    with pytest.raises(NotLeaderError):
        await save(3_000, 2_000, LeaderRecord("impostor").encode())
    # Numbers of different lengths still compare as numbers (fixed-width encoding).
    await save(10_000_000_000_000, 2_000)
    await store.revoke_lease(lease)
    with pytest.raises(NotLeaderError):
        await save(20_000_000_000_000, 10_000_000_000_000)
    raw = await store.get(ts_key)
    assert raw is not None
    assert decode_window(raw) == 10_000_000_000_000
