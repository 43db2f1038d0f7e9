"""The oracle's rules on an in-memory store and an injected clock (fast, deterministic)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from streamwal.errors import (
    ClosedError,
    InvalidInputError,
    NotLeaderError,
    TimestampOverflowError,
    UnavailableError,
)
from streamwal.tso.clock import ManualClock
from streamwal.tso.config import TsoConfig
from streamwal.tso.memory_store import MemoryStore
from streamwal.tso.oracle import TimestampOracle
from streamwal.tso.store import decode_window, encode_window
from streamwal.tso.timestamp import MAX_LOGICAL, split

Factory = Callable[..., Any]


def _config(**overrides: Any) -> TsoConfig:
    values: dict[str, Any] = {
        "key_prefix": "/unit",
        "lease_ttl_s": 1,
        "save_window_s": 3.0,
        "update_interval_s": 0.01,
        "unavailable_after_s": 1.0,
        "etcd_timeout_s": 0.2,
    }
    values.update(overrides)
    return TsoConfig(**values)


@asynccontextmanager
async def started_oracle(
    store: MemoryStore, clock: ManualClock | None = None, *, address: str = "", **overrides: Any
) -> AsyncIterator[TimestampOracle]:
    """An oracle on ``store`` once started (leader or not yet), closed on exit."""
    oracle = TimestampOracle(_config(**overrides), address=address, store=store, clock=clock)
    await oracle.start()
    try:
        yield oracle
    finally:
        await oracle.close()


@asynccontextmanager
async def serving(
    store: MemoryStore, clock: ManualClock | None = None, *, address: str = "", **overrides: Any
) -> AsyncIterator[TimestampOracle]:
    """An oracle on ``store`` once it serves, closed on exit."""
    async with started_oracle(store, clock, address=address, **overrides) as oracle:
        await oracle.wait_serving(2.0)
        yield oracle


async def _wait_until(predicate: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_the_window_is_persisted_before_serving() -> None:
    store = MemoryStore()
    async with serving(store) as oracle:
        ts = await oracle.generate()
        physical, logical = split(ts)
        saved = store.value(oracle.config.timestamp_key)
        assert saved is not None
        assert decode_window(saved) == physical + 3000
        assert logical == 1
        top = await oracle.generate(10)
        assert top == ts + 10


async def test_a_new_leader_starts_above_the_saved_window() -> None:
    store = MemoryStore()
    clock = ManualClock()
    future_window = clock.wall_ms() + 60_000  # an earlier leader ran a minute ahead
    store._data[_config().timestamp_key] = (encode_window(future_window), 0)
    async with serving(store, clock) as oracle:
        physical, _ = split(await oracle.generate())
        assert physical == future_window + 1


async def test_restart_with_the_clock_behind_never_goes_back() -> None:
    store = MemoryStore()
    async with serving(store) as first:
        before = [await first.generate() for _ in range(100)]
    behind = ManualClock(offset_ms=-10_000)
    async with serving(store, behind) as second:
        after = await second.generate()
    assert after > max(before)
    assert split(after)[0] > behind.wall_ms()  # the window, not the clock, decided


async def test_clock_jumping_back_10s_never_regresses() -> None:
    store = MemoryStore()
    clock = ManualClock()
    async with serving(store, clock) as oracle:
        seen = [await oracle.generate() for _ in range(50)]
        await asyncio.sleep(0.05)
        clock.shift(-10_000)
        for _ in range(40):  # spans many update ticks
            seen.append(await oracle.generate())
            await asyncio.sleep(0.005)
        assert seen == sorted(seen)
        assert len(set(seen)) == len(seen)
        assert oracle.stats.clock_went_back >= 1


async def test_logical_overflow_advances_physical_by_one_ms() -> None:
    clock = ManualClock(frozen_at_ms=1_800_000_000_000)
    async with serving(MemoryStore(), clock, update_interval_s=5.0, save_window_s=10.0) as oracle:
        first = await oracle.generate(MAX_LOGICAL - 1)
        second = await oracle.generate(2)
        assert second > first
        assert split(second) == (split(first)[0] + 1, 2)
        assert oracle.stats.physical_advances == 1


async def test_logical_overflow_waits_for_the_update_loop() -> None:
    # Window of 2 ms: no room to advance inline, so the caller waits a tick.
    clock = ManualClock(frozen_at_ms=1_800_000_000_000)
    async with serving(
        MemoryStore(), clock, update_interval_s=0.001, save_window_s=0.002
    ) as oracle:
        values = [await oracle.generate(MAX_LOGICAL // 2) for _ in range(8)]
        assert values == sorted(values)
        assert oracle.stats.overflow_waits >= 1


async def test_logical_overflow_gives_up_after_ten_tries() -> None:
    store = MemoryStore()
    clock = ManualClock(frozen_at_ms=1_800_000_000_000)
    async with serving(
        store, clock, lease_ttl_s=30, update_interval_s=0.001, save_window_s=0.002
    ) as oracle:
        store.available = False  # the update loop cannot save a new window
        with pytest.raises(TimestampOverflowError):
            for _ in range(4):
                await oracle.generate(MAX_LOGICAL - 1)
        assert oracle.stats.overflow_waits >= 10


async def test_a_revoked_lease_stops_serving_and_forgets_state() -> None:
    store = MemoryStore()
    clock = ManualClock(frozen_at_ms=1_800_000_000_000)
    async with serving(store, clock, save_window_s=0.05) as oracle:
        await oracle.generate()
        old_window = oracle.stats.last_saved_ms
        lease = oracle.lease_id
        assert lease is not None
        store.expire_lease(lease)
        clock.shift(49)  # brings physical to the window's edge: a save, which the fence refuses
        await _wait_until(lambda: oracle.stats.step_downs == 1)
        reason = oracle.stats.last_step_down_reason or ""
        assert reason.startswith("window save rejected")
        # It campaigned again and restarted from the saved window, not from memory.
        await oracle.wait_serving(2.0)
        assert oracle.stats.terms == 2
        physical, logical = split(await oracle.generate())
        assert physical == old_window + 1
        assert logical == 1


async def test_the_lease_deadline_is_on_the_monotonic_clock() -> None:
    store = MemoryStore()
    clock = ManualClock()
    async with serving(store, clock, lease_ttl_s=30) as oracle:
        old = await oracle.generate()
        store.available = False  # no keepalive, no new campaign
        clock.advance_monotonic(31)
        with pytest.raises(UnavailableError):
            await oracle.generate()
        assert not oracle.is_serving
        assert oracle.stats.last_step_down_reason == "lease deadline passed"
        store.available = True
        await oracle.wait_serving(2.0)
        assert await oracle.generate() > old


async def test_a_follower_names_the_leader() -> None:
    store = MemoryStore()
    async with (
        serving(store, address="leader:1") as leader,
        started_oracle(store, address="follower:2") as follower,
    ):
        with pytest.raises(NotLeaderError) as info:
            await follower.wait_serving(1.0, fail_if_follower=True)
        assert info.value.leader == "leader:1"
        assert follower.leader_address == "leader:1"
        with pytest.raises(NotLeaderError):
            await follower.generate()
        assert leader.is_serving


async def test_the_follower_takes_over_above_the_old_leader() -> None:
    store = MemoryStore()
    old = TimestampOracle(_config(), address="a", store=store)
    await old.start()
    await old.wait_serving(2.0)
    async with started_oracle(store, address="b") as follower:
        last_old = max([await old.generate() for _ in range(10)])
        await old.close()  # resigns: the key goes at once
        await follower.wait_serving(2.0)
        assert await follower.generate() > last_old


async def test_unavailable_store_bounds_the_wait() -> None:
    store = MemoryStore()
    store.available = False
    async with started_oracle(store) as oracle:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(UnavailableError):
            await oracle.wait_serving(0.3)
        assert loop.time() - started < 1.0


async def test_closed_oracle_refuses() -> None:
    async with serving(MemoryStore()) as oracle:
        with pytest.raises(InvalidInputError):
            await oracle.generate(0)
        with pytest.raises(InvalidInputError):
            await oracle.generate(MAX_LOGICAL)
    with pytest.raises(ClosedError):
        await oracle.generate()
    with pytest.raises(ClosedError):
        await oracle.wait_serving(0.1)
    with pytest.raises(ClosedError):
        await oracle.start()
    await oracle.close()


async def test_a_leader_found_dead_at_its_address_is_deposed_at_once_and_only_that_one() -> None:
    store = MemoryStore()
    async with (
        serving(store, address="dead:1") as leader,
        started_oracle(store, address="alive:2") as standby,
    ):
        before = await leader.generate()
        assert not await standby.depose_dead_leader("elsewhere:3")  # not the leader
        assert not await leader.depose_dead_leader("dead:1")  # never itself
        held = store.value(leader.config.leader_key)
        assert held is not None
        assert await standby.depose_dead_leader("dead:1")
        assert store.value(leader.config.leader_key) != held  # the term is over
        await standby.wait_serving(3.0)  # campaigns at once, no lease to wait out
        assert await standby.generate() > before
