"""The open suite: open-to-ready of a WAL (fence + first time tick) against a raw
create-producer-and-send, and the backoff schedule's cost after a broker outage."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pulsar
from pulsar import asyncio as pulsar_asyncio

from adaptors.pulsar import PulsarConfig, PulsarOpener
from adaptors.pulsar.opener import client_logger
from node.bench.stats import percentile, ratio
from node.faultproxy import FaultProxy
from tso import InProcessTSO, TsoConfig
from wal.initializing import open_wal

__all__ = ["run_open_bench"]


def _figures(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50) * 1000, 2),
        "p99_ms": round(percentile(samples, 99) * 1000, 2),
        "max_ms": round(max(samples) * 1000, 2),
    }


async def run_open_bench(
    pulsar_url: str,
    etcd_endpoint: str,
    *,
    opens: int = 100,
    outage_s: float = 1.0,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    config = PulsarConfig(service_url=pulsar_url)
    tso_config = TsoConfig(etcd_endpoints=(etcd_endpoint,), key_prefix=f"/bench-open-{run}")
    raw_samples: list[float] = []
    wal_samples: list[float] = []
    client = pulsar_asyncio.Client(pulsar_url, logger=client_logger())
    async with InProcessTSO(tso_config) as tso, PulsarOpener(config) as opener:
        await opener.verify_exclusivity()  # once per node, not per open
        for i in range(opens):
            started = time.perf_counter()
            producer = await client.create_producer(
                config.topic(f"bench-open-raw-{run}-{i}"),
                access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                batching_enabled=config.batching,  # the WAL's producer settings
                batching_max_publish_delay_ms=config.batching_max_delay_ms,
            )
            await producer.send(b"first")
            raw_samples.append(time.perf_counter() - started)
            await producer.close()

            started = time.perf_counter()
            wal = await open_wal(opener, f"bench-open-wal-{run}-{i}", tso.allocator(), 1)
            wal_samples.append(time.perf_counter() - started)
            await wal.close()
        progress(f"open: {opens} raw and {opens} WAL opens done")

        # broker unreachable for outage_s, then back: how long until ready
        broker_port = int(pulsar_url.rsplit(":", 1)[1])
        async with FaultProxy(broker_port) as proxy:
            slow = PulsarConfig(service_url=f"pulsar://{proxy.url_host}", operation_timeout_s=1)
            async with PulsarOpener(slow) as outage_opener:
                proxy.set_mode("refuse")
                loop = asyncio.get_running_loop()
                started = loop.time()
                task = asyncio.create_task(
                    open_wal(outage_opener, f"bench-outage-{run}", tso.allocator(), 1)
                )
                await asyncio.sleep(outage_s)
                back = loop.time()
                proxy.set_mode("pass")
                wal = await asyncio.wait_for(task, 60)
                ready = loop.time()
                await wal.close()
    await client.close()
    raw, walf = _figures(raw_samples), _figures(wal_samples)
    return {
        "raw_create_and_send": raw,
        "wal_open_to_ready": walf,
        "p50_ratio": ratio(walf["p50_ms"], raw["p50_ms"]),
        "outage_s": outage_s,
        "ready_after_broker_back_ms": round((ready - back) * 1000, 1),
        "total_open_with_outage_ms": round((ready - started) * 1000, 1),
    }
