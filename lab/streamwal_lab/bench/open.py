"""The open suite: open-to-ready of a WAL against a raw create-producer-and-send.

A WAL is ready when its first time tick is persisted: the fence (an exclusive producer
with fencing), a timestamp from the TSO, one send. The raw baseline creates the same
kind of producer with the WAL's settings and sends one message. Opens alternate raw,
WAL, raw, WAL... each on a fresh topic, so topic creation on the broker is in both.

The outage part: the broker is unreachable (a proxy refusing connections in front of
it) for ``outage_s`` while a WAL opens through the proxy on a fresh client, then comes
back; the figure is the time from its return to the WAL being ready, which is what the
first-time-tick backoff schedule and the client's operation timeout cost.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from streamwal.adaptors.pulsar import PolicyAction, PulsarConfig, PulsarOpener
from streamwal.tso import InProcessTSO
from streamwal.wal.initializing import open_wal
from streamwal_lab.bench.raw import raw_client, raw_producer
from streamwal_lab.bench.stats import distribution, ratio
from streamwal_lab.bench.target import CLIENT_LOG, BenchTarget, new_run
from streamwal_lab.faultproxy import FaultProxy

__all__ = ["run_open_bench"]


async def run_open_bench(
    target: BenchTarget,
    *,
    opens: int = 100,
    outage_s: float = 1.0,
    outage_repeats: int = 3,
    outage_operation_timeout_s: float = 1.0,
) -> dict[str, Any]:
    """``opens`` raw and WAL opens, then ``outage_repeats`` opens across a broker outage."""
    run = new_run()
    config = target.pulsar_config(admin=True)
    raw_samples: list[float] = []
    wal_samples: list[float] = []
    attempts: list[int] = []
    outages: list[dict[str, Any]] = []
    client = raw_client(target.pulsar_url)
    try:
        async with target.wal_services(f"/bench-open-{run}", config) as (tso, opener):
            await opener.verify_broker()  # once per node, not per open
            allocator = tso.allocator()
            for i in range(opens):
                started = time.perf_counter()
                producer = await raw_producer(
                    client, config.topic(f"bench-open-raw-{run}-{i}"), config
                )
                await producer.send(b"first")
                raw_samples.append(time.perf_counter() - started)
                await producer.close()

                started = time.perf_counter()
                wal = await open_wal(opener, f"bench-open-wal-{run}-{i}", allocator, 1)
                wal_samples.append(time.perf_counter() - started)
                attempts.append(wal.open_attempts)
                await wal.close()
            target.progress(f"open: {opens} raw and {opens} WAL opens done")
            for i in range(outage_repeats):
                outages.append(
                    await _open_across_outage(
                        target, tso, f"bench-outage-{run}-{i}", outage_s, outage_operation_timeout_s
                    )
                )
                target.progress(
                    f"open: broker back after {outage_s:g} s -> ready in "
                    f"{outages[-1]['ready_after_broker_back_ms']} ms"
                )
    finally:
        await client.close()
    raw, walf = distribution(raw_samples), distribution(wal_samples)
    back = [o["ready_after_broker_back_ms"] for o in outages]
    return {
        "opens": opens,
        "raw_create_and_send": raw,
        "wal_open_to_ready": walf,
        "wal_open_attempts_max": max(attempts, default=0),
        "p50_ratio": ratio(walf.get("p50_ms", 0), raw.get("p50_ms", 0)),
        "p99_ratio": ratio(walf.get("p99_ms", 0), raw.get("p99_ms", 0)),
        "outage": {
            "outage_s": outage_s,
            "operation_timeout_s": outage_operation_timeout_s,
            "runs": outages,
            "ready_after_broker_back_ms_median": round(statistics.median(back), 1)
            if back
            else None,
        },
    }


async def _open_across_outage(
    target: BenchTarget, tso: InProcessTSO, channel: str, outage_s: float, op_timeout_s: float
) -> dict[str, Any]:
    broker_port = int(target.pulsar_url.rsplit(":", 1)[1])
    async with FaultProxy(broker_port) as proxy:
        slow = PulsarConfig(
            service_url=f"pulsar://{proxy.url_host}",
            operation_timeout_s=op_timeout_s,
            verify_exclusivity=False,  # a node checks once at start, not per open
            on_no_deduplication=PolicyAction.IGNORE,  # likewise
            client_log_file=CLIENT_LOG,
        )
        async with PulsarOpener(slow) as outage_opener:
            proxy.set_mode("refuse")
            loop = asyncio.get_running_loop()
            started = loop.time()
            task = asyncio.create_task(open_wal(outage_opener, channel, tso.allocator(), 1))
            await asyncio.sleep(outage_s)
            back = loop.time()
            proxy.set_mode("pass")
            wal = await asyncio.wait_for(task, 60)
            ready = loop.time()
            result = {
                "ready_after_broker_back_ms": round((ready - back) * 1000, 1),
                "total_open_ms": round((ready - started) * 1000, 1),
                "attempts": wal.open_attempts,
            }
            await wal.close()
    return result
