"""Failover with the default settings, on real node processes: a killed owner's channels
take writes again within 5 s, and a node that is only paused keeps everything."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamwal.cluster import ClusterClient, ClusterSettings
from streamwal.cluster.records import MoveReason
from streamwal.cluster.view import ClusterView
from streamwal.tso.config import TsoConfig
from streamwal.tso.store import LeaderRecord
from streamwal.verify.cli import verify_channel
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster, Writer, owners

pytestmark = pytest.mark.integration

#: issue 49: kill -9 of an owner to the first acknowledged write, with the defaults
BOUND_S = 5.0
_DEFAULTS = ClusterSettings()


async def _tso_leader(cluster: TestCluster) -> int:
    raw = await cluster.store.get(TsoConfig(key_prefix=cluster.prefix).leader_key)
    assert raw is not None
    address = LeaderRecord.decode(raw).address
    return next(n for n, p in cluster.nodes.items() if p.address == address)


@pytest.fixture
async def cluster(
    stack: StackInfo, tmp_path: Path, etcd_prefix: object, unique: str
) -> AsyncIterator[TestCluster]:
    prefix = etcd_prefix("fo")  # type: ignore[operator]
    made = TestCluster(
        stack,
        tmp_path,
        prefix,
        [f"fo-{unique}-{i}" for i in range(6)],
        lease_ttl_s=_DEFAULTS.lease_ttl_s,
        grace_period_s=_DEFAULTS.grace_period_s,
        round_interval_s=_DEFAULTS.round_interval_s,
        poll_interval_s=_DEFAULTS.poll_interval_s,
    )
    # the TSO's defaults too: in-process on every node, as the README's cluster runs it
    made.tso = {"mode": "in-process", "key_prefix": prefix, "lease_ttl_s": TsoConfig().lease_ttl_s}
    await made.start(1, 2, 3)
    try:
        yield made
    finally:
        await made.close()


async def test_kill_9_fails_over_within_5s_with_the_defaults_and_a_pause_moves_nothing(
    cluster: TestCluster, stack: StackInfo
) -> None:
    view = await cluster.wait_balanced()
    async with ClusterClient([stack.etcd_endpoint], key_prefix=cluster.prefix) as client:
        writers = {c: Writer(client, c) for c in cluster.channels}
        for writer in writers.values():
            writer.start()
        try:
            # a node paused for 3 s (a long GC, a stalled disk) is slow, not dead
            paused = view.assignments[cluster.channels[1]].node
            before = owners(await cluster.wait_balanced())
            moves_before = len((await cluster.view()).moves)
            process = cluster.nodes[paused].proc
            assert process is not None
            process.send_signal(signal.SIGSTOP)
            await asyncio.sleep(3.0)
            process.send_signal(signal.SIGCONT)
            await asyncio.sleep(2.0 * _DEFAULTS.round_interval_s + 1.0)
            view = await cluster.view()
            assert owners(view) == before and len(view.moves) == moves_before, view.moves
            assert paused in view.nodes and paused not in view.lost

            gaps: list[float] = []
            for kill in range(2):
                view = await cluster.wait_balanced()
                victim = view.assignments[cluster.channels[kill]].node
                if kill == 0:  # the TSO's leader first: its term must not be waited out
                    victim = await _tso_leader(cluster)
                moved = [c for c, node in owners(view).items() if node == victim]
                await asyncio.sleep(0.5)
                killed_at = time.monotonic()
                await cluster.nodes[victim].kill()

                def moved_off(v: ClusterView, n: int = victim, m: list[str] = moved) -> bool:
                    return all(v.serving(c) and v.assignments[c].node != n for c in m)

                view = await cluster.wait_for("the victim's channels elsewhere", moved_off, 30)
                assert view.lost[victim].evidence == "connection-refused"
                reasons = {m.channel: m.reason for _k, m in view.moves if m.channel in moved}
                assert reasons == dict.fromkeys(moved, MoveReason.NODE_LOST)
                await asyncio.sleep(1.0)
                for channel in moved:
                    first = writers[channel].first_ack_after(killed_at)
                    assert first is not None, channel
                    gaps.append(first - killed_at)
                await cluster.restart(victim)
            print(f"kill to first acknowledged write, per channel: {[round(g, 2) for g in gaps]}")
            assert max(gaps) <= BOUND_S, gaps
        finally:
            for writer in writers.values():
                await writer.stop()
    for channel, writer in writers.items():
        assert writer.acks, channel
        report = await verify_channel(
            stack.pulsar_url, channel, acks=writer.acks, failures=writer.failures
        )
        assert report.ok, (channel, report.summary())
