"""The append suite: appends/s and latency, WAL against a raw producer, same broker.

For each (payload size, concurrency) cell the raw producer and the WAL run in turn,
``repeats`` times, interleaved (raw, WAL, raw, WAL...) so drift on a noisy machine hits
both; the figures are the medians. The raw producer uses the WAL's producer settings
(batching on, 1 ms delay) so the ratio is the cost of the WAL itself: time ticks from
the TSO, encoding, interceptors, ordering.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pulsar
from pulsar import asyncio as pulsar_asyncio

from adaptors.pulsar import PulsarConfig, PulsarOpener
from adaptors.pulsar.opener import client_logger
from node.bench.stats import median_of, ratio, summarize
from tso import InProcessTSO, TsoConfig
from wal.initializing import open_wal
from wal.message import MessageType, MutableMessage
from wal.wal import WAL

__all__ = ["run_append_bench"]

Append = Callable[[bytes], Awaitable[object]]


async def _timed(
    append: Append, payload: bytes, concurrency: int, seconds: float
) -> dict[str, float]:
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def worker() -> None:
        while loop.time() < deadline:
            started = time.perf_counter()
            await append(payload)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return summarize(latencies, time.perf_counter() - started)


async def run_append_bench(
    pulsar_url: str,
    etcd_endpoint: str,
    *,
    payloads: Sequence[int] = (128, 4096),
    concurrency: Sequence[int] = (1, 32),
    seconds: float = 2.0,
    repeats: int = 3,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    config = PulsarConfig(service_url=pulsar_url)
    cells: list[dict[str, Any]] = []
    client = pulsar_asyncio.Client(pulsar_url, logger=client_logger())
    tso_config = TsoConfig(etcd_endpoints=(etcd_endpoint,), key_prefix=f"/bench-{run}")
    async with InProcessTSO(tso_config) as tso, PulsarOpener(config) as opener:
        for size in payloads:
            for conc in concurrency:
                payload = b"x" * size
                raw_topic = config.topic(f"bench-raw-{run}-{size}-{conc}")
                producer = await client.create_producer(
                    raw_topic,
                    access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                    batching_enabled=config.batching,
                    batching_max_publish_delay_ms=config.batching_max_delay_ms,
                    max_pending_messages=config.max_pending_messages,
                    block_if_queue_full=False,
                )
                wal = await open_wal(
                    opener, f"bench-wal-{run}-{size}-{conc}", tso.allocator(), node_id=1
                )

                async def raw_append(data: bytes, producer: Any = producer) -> object:
                    return await producer.send(data)

                async def wal_append(data: bytes, wal: WAL = wal) -> object:
                    return await wal.append(MutableMessage(MessageType.INSERT, data))

                await _timed(raw_append, payload, conc, 0.3)  # warm up both
                await _timed(wal_append, payload, conc, 0.3)
                raw_runs, wal_runs = [], []
                for _ in range(repeats):
                    raw_runs.append(await _timed(raw_append, payload, conc, seconds))
                    wal_runs.append(await _timed(wal_append, payload, conc, seconds))
                raw, walf = median_of(raw_runs), median_of(wal_runs)
                cell = {
                    "payload_bytes": size,
                    "concurrency": conc,
                    "raw": raw,
                    "wal": walf,
                    "throughput_ratio": ratio(walf["per_s"], raw["per_s"]),
                    "p99_ratio": ratio(walf["p99_ms"], raw["p99_ms"]),
                }
                cells.append(cell)
                progress(
                    f"append {size:>6} B x{conc:<3}: raw {raw['per_s']:>9.0f}/s "
                    f"wal {walf['per_s']:>9.0f}/s  ratio {cell['throughput_ratio']}"
                )
                await wal.close()
                await producer.close()
    await client.close()
    return {"seconds_per_run": seconds, "repeats": repeats, "cells": cells}
