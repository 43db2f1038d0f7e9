"""The oracle on a real etcd: concurrency, restart, deposed leader, clock jumps."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import etcd3
import pytest

from streamwal.errors import NotLeaderError, UnavailableError
from streamwal.tso.allocator import LocalAllocator
from streamwal.tso.clock import ManualClock
from streamwal.tso.config import EtcdConfig, TsoConfig
from streamwal.tso.etcd_store import EtcdStore
from streamwal.tso.inprocess import InProcessTSO
from streamwal.tso.oracle import TimestampOracle
from streamwal.tso.remote import RemoteSource
from streamwal.tso.service import TsoServer
from streamwal.tso.store import LeaderRecord, decode_window
from streamwal.tso.timestamp import split

pytestmark = pytest.mark.integration


def _config(endpoint: str, prefix: str, **overrides: Any) -> TsoConfig:
    values: dict[str, Any] = {
        "etcd": EtcdConfig((endpoint,)),
        "key_prefix": prefix,
        "unavailable_after_s": 5.0,
    }
    values.update(overrides)
    return TsoConfig(**values)


async def _four_callers(allocator: LocalAllocator, total: int) -> list[list[int]]:
    per_caller = total // 4

    async def caller() -> list[int]:
        out = []
        for i in range(per_caller):
            out.append(await allocator.allocate())
            if i % 97 == 0:
                await asyncio.sleep(0)  # interleave the callers within ranges too
        return out

    return list(await asyncio.gather(*(caller() for _ in range(4))))


def _assert_monotonic_and_unique(results: list[list[int]]) -> None:
    for values in results:
        assert all(a < b for a, b in itertools.pairwise(values))
    everything = [v for values in results for v in values]
    assert len(set(everything)) == len(everything)


async def test_100k_allocations_from_4_callers_in_process(
    etcd_endpoint: str, tso_prefix: str
) -> None:
    async with InProcessTSO(_config(etcd_endpoint, tso_prefix)) as tso:
        results = await _four_callers(tso.allocator(), 100_000)
    _assert_monotonic_and_unique(results)
    assert sum(len(r) for r in results) == 100_000


async def test_100k_allocations_from_4_callers_over_grpc(
    etcd_endpoint: str, tso_prefix: str
) -> None:
    async with (
        InProcessTSO(_config(etcd_endpoint, tso_prefix)) as tso,
        TsoServer(tso.oracle, "127.0.0.1:0") as server,
    ):
        allocator = LocalAllocator(RemoteSource(server.address), 1000, close_source=True)
        async with allocator:
            results = await _four_callers(allocator, 100_000)
    _assert_monotonic_and_unique(results)


async def test_restart_with_a_clock_behind_starts_above_every_earlier_timestamp(
    etcd_endpoint: str, tso_prefix: str
) -> None:
    config = _config(etcd_endpoint, tso_prefix)
    async with InProcessTSO(config) as first:
        allocator = first.allocator(batch_size=10)
        earlier = [await allocator.allocate() for _ in range(500)]
        saved_window = first.oracle.stats.last_saved_ms
    behind = ManualClock(offset_ms=-10_000)
    async with InProcessTSO(config, clock=behind) as second:
        ts = await second.allocator().allocate()
    assert ts > max(earlier)
    physical, _ = split(ts)
    # The clock said ten seconds ago; the saved window decided where to start.
    assert physical == saved_window + 1
    assert physical > behind.wall_ms() + 5_000


async def test_clock_jumping_back_10s_never_regresses(etcd_endpoint: str, tso_prefix: str) -> None:
    clock = ManualClock()
    config = _config(etcd_endpoint, tso_prefix, save_window_s=0.5)
    async with InProcessTSO(config, clock=clock) as tso:
        allocator = tso.allocator(batch_size=5)
        seen = [await allocator.allocate() for _ in range(200)]
        clock.shift(-10_000)
        loop = asyncio.get_running_loop()
        until = loop.time() + 1.5  # many update ticks and several window saves
        while loop.time() < until:
            seen.append(await allocator.allocate())
            await asyncio.sleep(0.002)
        stats = tso.oracle.stats
    assert all(a < b for a, b in itertools.pairwise(seen))
    assert stats.clock_went_back >= 1
    assert stats.step_downs == 0


async def test_a_deposed_leader_cannot_persist_and_stops_serving(
    etcd_endpoint: str, tso_prefix: str
) -> None:
    # A long lease (keepalive every 10 s) and a short window (a save every ~0.2 s):
    # the rejected save, not the keepalive, is what deposes the leader here.
    config = _config(etcd_endpoint, tso_prefix, lease_ttl_s=30, save_window_s=0.2)
    successor = LeaderRecord(id="successor", address="successor-host:7002")
    oracle = TimestampOracle(config, address="old-leader:1")
    await oracle.start()
    host, port = config.endpoints[0]
    admin = etcd3.client(host, port, timeout=5)
    successor_lease = None
    try:
        await oracle.wait_serving()
        served = [await oracle.generate() for _ in range(100)]
        lease = oracle.lease_id
        assert lease is not None
        # Another node takes the key on its own lease, then the old lease goes (as if it
        # had expired). The key is never free, so the old leader cannot win it back.
        successor_lease = await asyncio.to_thread(admin.lease, 60)
        await asyncio.to_thread(admin.put, config.leader_key, successor.encode(), successor_lease)
        await asyncio.to_thread(admin.revoke_lease, lease)

        # Its own fenced save now fails ...
        async with EtcdStore([etcd_endpoint]) as store:
            with pytest.raises(NotLeaderError):
                await store.save_window(
                    config.timestamp_key,
                    oracle.stats.last_saved_ms + 10_000,
                    previous_ms=oracle.stats.last_saved_ms,
                    leader_key=config.leader_key,
                    leader_value=oracle.identity,
                )

            # ... and so does the update loop's: it stops serving and forgets its state;
            # the first call after the step-down is already refused.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5.0
            refusal: Exception | None = None
            while refusal is None:
                assert loop.time() < deadline, "the deposed leader kept serving"
                try:
                    served.append(await oracle.generate())
                except (NotLeaderError, UnavailableError) as exc:
                    refusal = exc
                await asyncio.sleep(0.005)
            assert oracle.stats.step_downs == 1
            assert (oracle.stats.last_step_down_reason or "").startswith("window save rejected")
            # Until its next campaign reads the key it knows no leader (UnavailableError);
            # from then on it redirects to the one holding the key.
            if isinstance(refusal, NotLeaderError):
                assert refusal.leader == successor.address
            with pytest.raises(NotLeaderError) as follower:
                await oracle.wait_serving(3.0, fail_if_follower=True)
            assert follower.value.leader == successor.address
            with pytest.raises(NotLeaderError) as info:
                await oracle.generate()
            assert info.value.leader == successor.address
            assert not oracle.is_serving and oracle.stats.terms == 1
            raw = await store.get(config.timestamp_key)
        assert raw is not None
        # Nothing it served lies above what etcd holds: a successor starts higher.
        assert max(split(ts)[0] for ts in served) < decode_window(raw)
    finally:
        await oracle.close()
        if successor_lease is not None:
            await asyncio.to_thread(admin.revoke_lease, successor_lease.id)
        await asyncio.to_thread(admin.delete_prefix, tso_prefix + "/")
        admin.close()


async def test_a_leader_keeps_its_lease_across_several_ttls(
    etcd_endpoint: str, tso_prefix: str
) -> None:
    # A 1 s lease held for 3.5 s: only working keepalives (every ttl/3) keep this term.
    config = _config(etcd_endpoint, tso_prefix, lease_ttl_s=1, save_window_s=0.5)
    async with InProcessTSO(config, address="steady:1") as tso:
        oracle = tso.oracle
        lease = oracle.lease_id
        assert lease is not None
        loop = asyncio.get_running_loop()
        until = loop.time() + 3.5 * config.lease_ttl_s
        seen = []
        while loop.time() < until:
            seen.append(await oracle.generate())
            assert oracle.is_serving
            await asyncio.sleep(0.02)
        stats = oracle.stats
        assert (stats.step_downs, stats.terms) == (0, 1), stats.last_step_down_reason
        assert oracle.lease_id == lease
        # etcd agrees: the key is still this term's, on a lease with time left.
        host, port = config.endpoints[0]
        admin = etcd3.client(host, port, timeout=5)
        try:
            value, meta = await asyncio.to_thread(admin.get, config.leader_key)
            info = await asyncio.to_thread(admin.get_lease_info, lease)
        finally:
            admin.close()
        assert value == oracle.identity
        assert meta.lease_id == lease and info.TTL > 0
    assert all(a < b for a, b in itertools.pairwise(seen))
    assert stats.saves >= 3  # the window moved on, fenced by the same key, all along


async def test_a_follower_refuses_and_names_the_leader(etcd_endpoint: str, tso_prefix: str) -> None:
    config = _config(etcd_endpoint, tso_prefix)
    async with InProcessTSO(config, address="leader-host:7000") as leader:
        follower = TimestampOracle(config, address="follower-host:7001")
        await follower.start()
        try:
            with pytest.raises(NotLeaderError) as info:
                await follower.wait_serving(3.0, fail_if_follower=True)
            assert info.value.leader == "leader-host:7000"
            assert leader.oracle.is_serving
        finally:
            await follower.close()


async def test_no_etcd_gives_unavailable_within_the_bound() -> None:
    config = TsoConfig(
        etcd=EtcdConfig(("127.0.0.1:1",)), key_prefix="/nowhere", unavailable_after_s=0.5
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(UnavailableError):
        async with InProcessTSO(config):
            pass
    assert loop.time() - started < 3.0
