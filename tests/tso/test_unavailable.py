"""etcd goes away and comes back: typed errors within the bound, then monotonic recovery.

Uses an etcd of its own (killed and restarted here), never the shared stack's.
"""

from __future__ import annotations

import asyncio

import pytest

from streamwal.errors import UnavailableError
from streamwal.tso.config import EtcdConfig, TsoConfig
from streamwal.tso.inprocess import InProcessTSO
from tests.tso.etcd_proc import EtcdProcess

pytestmark = pytest.mark.integration

_BOUND_S = 1.5


async def test_etcd_outage_fails_typed_within_the_bound_then_recovers(
    private_etcd: EtcdProcess,
) -> None:
    config = TsoConfig(
        etcd=EtcdConfig((private_etcd.endpoint,)),
        key_prefix="/unavailable",  # its own etcd, gone with the test's folder
        lease_ttl_s=2,
        unavailable_after_s=_BOUND_S,
        etcd_timeout_s=0.5,
    )
    loop = asyncio.get_running_loop()
    async with InProcessTSO(config) as tso:
        allocator = tso.allocator(batch_size=10)
        before = [await allocator.allocate() for _ in range(100)]

        await asyncio.to_thread(private_etcd.kill)
        # The leader may serve out its lease; after that every fetch must fail typed,
        # and no single call may hang past the bound.
        error: UnavailableError | None = None
        give_up = loop.time() + config.lease_ttl_s + 10.0
        while error is None:
            assert loop.time() < give_up, "allocation kept succeeding without etcd"
            await allocator.sync()
            started = loop.time()
            try:
                before.append(await allocator.allocate())
            except UnavailableError as exc:
                error = exc
            elapsed = loop.time() - started
            assert elapsed < _BOUND_S + 0.5, f"one allocate() took {elapsed:.2f}s"
            await asyncio.sleep(0.05)
        assert not tso.oracle.is_serving

        private_etcd.start()  # on this thread: etcd dies with the thread that started it
        after: list[int] = []
        give_up = loop.time() + 20.0
        while len(after) < 100:
            assert loop.time() < give_up, "no recovery after etcd came back"
            try:
                after.append(await allocator.allocate())
            except UnavailableError:
                await asyncio.sleep(0.1)
    assert min(after) > max(before)
    assert after == sorted(set(after))
