"""The append suite: appends/s and latency, WAL against a raw producer, same broker.

For each (payload size, concurrency) cell the raw producer and the WAL run in turn,
``repeats`` times, interleaved (raw, WAL, raw, WAL...) so drift on a noisy machine hits
both; the figures are the medians. The raw producer (:mod:`streamwal_lab.bench.raw`: batching
with a 1 ms delay, a callback per message, the WAL's pending limit) runs on a client of
its own. The ratio is what the WAL costs or saves over that: time ticks from the TSO,
encoding, interceptors, ordered publication and the write-ahead buffer on one side;
on the other, send receipts on the edges of segments of appends instead of one per
message (:mod:`streamwal.adaptors.pulsar.segments`).
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Sequence
from typing import Any, Unpack

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.adaptors.pulsar.metrics import READ_AGAIN, READ_BACK, UNPLACED, segment_count
from streamwal.tso import InProcessTSO
from streamwal.wal.initializing import open_wal
from streamwal_lab.bench.raw import RAW_BATCHING_DELAY_MS, raw_client, raw_producer
from streamwal_lab.bench.sides import (
    Append,
    Schedule,
    Timed,
    closed_loop,
    interleaved,
    wal_appender,
)
from streamwal_lab.bench.stats import median_of, ratios, summarize
from streamwal_lab.bench.target import BenchTarget, Timing, new_run

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_PAYLOADS",
    "appending",
    "run_append_bench",
    "timed_appends",
]

DEFAULT_PAYLOADS = (128, 4096, 65536)
DEFAULT_CONCURRENCY = (1, 8, 32, 128)


async def timed_appends(
    append: Append, payload: bytes, concurrency: int, seconds: float
) -> dict[str, float]:
    """``concurrency`` tasks appending back to back for ``seconds``; throughput and latency.

    ``gc_pause_ms``: time spent in the garbage collector meanwhile (it stops every
    appender at once, so it shows in the tail latencies).
    """
    pauses = _GcPauses()
    with pauses:
        calls = [functools.partial(append, payload)] * concurrency
        latencies, elapsed = await closed_loop(calls, seconds)
    figures = summarize(latencies, elapsed)
    figures["gc_pause_ms"] = round(pauses.total_s * 1000, 1)
    return figures


def appending(append: Append, payload: bytes, concurrency: int) -> Timed:
    """The side that runs :func:`timed_appends` of ``append``."""
    return functools.partial(timed_appends, append, payload, concurrency)


class _GcPauses:
    """Adds up garbage-collection time while entered (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._started = 0.0

    def _callback(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.total_s += time.perf_counter() - self._started

    def __enter__(self) -> _GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


async def run_append_bench(
    target: BenchTarget,
    *,
    payloads: Sequence[int] = DEFAULT_PAYLOADS,
    concurrency: Sequence[int] = DEFAULT_CONCURRENCY,
    **timing: Unpack[Timing],
) -> dict[str, Any]:
    """Every cell of ``payloads`` x ``concurrency``; see the module docstring."""
    run = new_run()
    schedule = Schedule.of(timing, repeats=5)
    config = target.pulsar_config(admin=True)
    cells: list[dict[str, Any]] = []
    client = raw_client(target.pulsar_url)
    try:
        async with target.wal_services(f"/bench-{run}", config) as (tso, opener):
            for size in payloads:
                for conc in concurrency:
                    cell = await _cell(client, opener, tso, config, run, size, conc, schedule)
                    cells.append(cell)
                    target.progress(
                        f"append {size:>6} B x{conc:<3}: raw {cell['raw']['per_s']:>8.0f}/s "
                        f"wal {cell['wal']['per_s']:>8.0f}/s ratio {cell['throughput_ratio']}; "
                        f"p99 raw {cell['raw']['p99_ms']} ms wal {cell['wal']['p99_ms']} ms"
                    )
    finally:
        await client.close()
    return {
        **schedule.figures(),
        "producer": {
            "batching": config.batching,
            "raw_batching_max_delay_ms": RAW_BATCHING_DELAY_MS,
            "max_pending_messages": config.max_pending_messages,
        },
        "cells": cells,
    }


async def _cell(
    client: Any,
    opener: PulsarOpener,
    tso: InProcessTSO,
    config: PulsarConfig,
    run: str,
    size: int,
    conc: int,
    schedule: Schedule,
) -> dict[str, Any]:
    payload = b"x" * size
    producer = await raw_producer(client, config.topic(f"bench-raw-{run}-{size}-{conc}"), config)
    channel = f"bench-wal-{run}-{size}-{conc}"
    wal = await open_wal(opener, channel, tso.allocator(), node_id=1)
    try:
        sides = {
            "raw": appending(producer.send, payload, conc),
            "wal": appending(wal_appender(wal), payload, conc),
        }
        runs = await interleaved(sides, schedule)
    finally:
        await wal.close()
        await producer.close()
    raw, walf = median_of(runs["raw"]), median_of(runs["wal"])
    return {
        "payload_bytes": size,
        "concurrency": conc,
        "raw": raw,
        "wal": walf,
        **ratios(walf, raw),
        "runs": runs,
        # segments whose edge receipts did not place them (adaptors/pulsar/segments.py)
        "wal_segments_read_back": segment_count(channel, READ_BACK),
        "wal_segments_read_again": segment_count(channel, READ_AGAIN),
        "wal_segments_unplaced": segment_count(channel, UNPLACED),
    }
