"""The pipelined suite: messages/s when nobody awaits one message at a time.

For each payload size, three sides run in turn, ``repeats`` times, interleaved (raw,
WAL, node, raw...), each for ``seconds``, on a channel of its own; the figures are the
medians:

- ``raw``: a ``pulsar-client`` producer's ``send_async`` loop (the blocking client,
  callbacks on its own thread, blocking when its pending queue is full, batching as
  :mod:`streamwal_lab.bench.raw` sets it), flushed at the end: the ceiling of this
  broker and client;
- ``wal``: ``callers`` tasks each appending batches of ``batch`` messages with
  :meth:`~streamwal.wal.WAL.append_many`, in this process;
- ``node``: ``callers`` tasks each sending ``ProduceBatch`` calls of ``batch`` messages to
  a node in a child process (:mod:`streamwal_lab.bench.node_process`; its tracing on),
  answered in the compact form (a run per pack, expanded by the client, as
  :meth:`~streamwal.node.client.NodeClient.produce_batch` asks for it).

Batch latency (``batch_p50_ms``, ``batch_p99_ms``) is the time one batch call takes.
``pack_appends`` is the WAL's and the node's ``wal.pack_appends`` (off: one entry per
message, the producer batching as ``pulsar.batching`` says): the same run with it off
and on shows what packs change.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Unpack

import pulsar

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.node.client import NodeClient
from streamwal.tso import InProcessTSO
from streamwal.wal.config import WALConfig
from streamwal.wal.initializing import open_wal
from streamwal.wal.message import MessageType, MutableMessage
from streamwal_lab.bench.node_process import node_and_client
from streamwal_lab.bench.raw import blocking_raw_client, producer_settings
from streamwal_lab.bench.sides import Schedule, closed_loop, interleaved, side_medians
from streamwal_lab.bench.stats import percentile, ratio
from streamwal_lab.bench.target import BenchTarget, Timing, new_run

__all__ = ["DEFAULT_PIPELINED_PAYLOADS", "run_pipelined_bench", "timed_batches"]

DEFAULT_PIPELINED_PAYLOADS = (128, 4096)
SIDES = ("raw", "wal", "node")


async def timed_batches(
    send: Callable[[], Awaitable[object]], batch: int, callers: int, seconds: float
) -> dict[str, float]:
    """``callers`` tasks calling ``send`` (one batch of ``batch`` messages) back to back."""
    latencies, elapsed = await closed_loop([send] * callers, seconds)
    return {
        "messages": len(latencies) * batch,
        "per_s": round(len(latencies) * batch / elapsed, 1),
        "batch_p50_ms": round(percentile(latencies, 50) * 1000, 3),
        "batch_p99_ms": round(percentile(latencies, 99) * 1000, 3),
    }


def _raw_loop(producer: Any, payload: bytes, seconds: float) -> dict[str, float]:
    """``send_async`` back to back for ``seconds``, then flush; on a thread of its own."""
    failed = 0
    lock = threading.Lock()

    def sent(result: Any, _message_id: Any) -> None:
        nonlocal failed
        if result != pulsar.Result.Ok:
            with lock:
                failed += 1

    count = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for _ in range(100):
            producer.send_async(payload, sent)
        count += 100
    producer.flush()
    elapsed = time.perf_counter() - started
    return {"messages": count, "per_s": round(count / elapsed, 1), "failed": failed}


async def run_pipelined_bench(
    target: BenchTarget,
    *,
    payloads: Sequence[int] = DEFAULT_PIPELINED_PAYLOADS,
    batch: int = 256,
    callers: int = 4,
    pack_appends: bool = True,
    **timing: Unpack[Timing],
) -> dict[str, Any]:
    """Every payload size; see the module docstring."""
    run = new_run()
    schedule = Schedule.of(timing)
    config = target.pulsar_config()
    wal_config = WALConfig(pack_appends=pack_appends)
    raw_client = blocking_raw_client(target.pulsar_url)
    cells: list[dict[str, Any]] = []
    try:
        async with (
            node_and_client(
                target,
                key_prefix=f"/bench-pipe-{run}-node",
                log_name=f"node-pipelined-{run}.log",
                extra_env={"STREAMWAL_WAL__PACK_APPENDS": str(pack_appends).lower()},
            ) as (node, client),
            target.wal_services(f"/bench-pipe-{run}-wal", config) as (tso, opener),
        ):
            for size in payloads:
                cell = await _cell(
                    raw_client, client, opener, tso, config, f"{run}-{size}", size,
                    batch, callers, schedule, wal_config,
                )  # fmt: skip
                cells.append(cell)
                target.progress(
                    f"pipelined {size:>5} B: raw {cell['raw']['per_s']:>8.0f}/s "
                    f"wal {cell['wal']['per_s']:>8.0f}/s ({cell['wal_vs_raw_ratio']}) "
                    f"node {cell['node']['per_s']:>8.0f}/s ({cell['node_vs_raw_ratio']})"
                )
    finally:
        await asyncio.to_thread(raw_client.close)
    return {
        **schedule.figures(),
        "batch": batch,
        "callers": callers,
        "pack_appends": pack_appends,
        "node": {"process": "child", "tracing": "on, not exported", "exit_code": node.exit_code},
        "cells": cells,
    }


async def _cell(
    raw_client: Any,
    client: NodeClient,
    opener: PulsarOpener,
    tso: InProcessTSO,
    config: PulsarConfig,
    name: str,
    size: int,
    batch: int,
    callers: int,
    schedule: Schedule,
    wal_config: WALConfig,
) -> dict[str, Any]:
    payload = bytes(size)
    msgs = [MutableMessage(MessageType.INSERT, payload)] * batch
    payloads = [payload] * batch
    node_channel = f"bench-pipe-node-{name}"
    async with contextlib.AsyncExitStack() as held:
        producer = await asyncio.to_thread(
            raw_client.create_producer,
            config.topic(f"bench-pipe-raw-{name}"),
            **producer_settings(config, block_if_queue_full=True),
        )
        held.push_async_callback(asyncio.to_thread, producer.close)
        wal = await open_wal(
            opener, f"bench-pipe-wal-{name}", tso.allocator(), node_id=1, config=wal_config
        )
        held.push_async_callback(wal.close)
        await client.assign(node_channel)
        held.push_async_callback(client.remove, node_channel)

        async def raw(secs: float) -> dict[str, float]:
            return await asyncio.to_thread(_raw_loop, producer, payload, secs)

        async def wal_side(secs: float) -> dict[str, float]:
            return await timed_batches(lambda: wal.append_many(msgs), batch, callers, secs)

        async def node_side(secs: float) -> dict[str, float]:
            return await timed_batches(
                lambda: client.produce_batch(node_channel, payloads), batch, callers, secs
            )

        runs = await interleaved({"raw": raw, "wal": wal_side, "node": node_side}, schedule)
    medians = side_medians(runs)
    return {
        "payload_bytes": size,
        **medians,
        "wal_vs_raw_ratio": ratio(medians["wal"]["per_s"], medians["raw"]["per_s"]),
        "node_vs_raw_ratio": ratio(medians["node"]["per_s"], medians["raw"]["per_s"]),
        "runs": runs,
    }
