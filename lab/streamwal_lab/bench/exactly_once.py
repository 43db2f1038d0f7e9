"""The exactly-once suite: what idempotence and transactions cost, on the real broker.

For each concurrency, plain appends and idempotent appends (one producer id, a
sequence number each) run in turn on two channels of one node's WALs, ``repeats``
times, interleaved so drift on a noisy machine hits both; the figures are the
medians, the ratio is idempotent over plain. Then committed transactions per second:
``concurrency`` writers each begin a transaction, append ``txn_size`` messages into
it (pipelined) and commit, back to back; the commit latency is timed apart.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Sequence
from typing import Any, Unpack

from streamwal.wal.initializing import open_wal
from streamwal.wal.message import MessageType, MutableMessage
from streamwal.wal.wal import WAL
from streamwal_lab.bench.append import appending
from streamwal_lab.bench.sides import Schedule, interleaved, wal_appender
from streamwal_lab.bench.stats import distribution, median_of, ratios
from streamwal_lab.bench.target import BenchTarget, Timing, new_run

__all__ = ["DEFAULT_EOS_CONCURRENCY", "run_exactly_once_bench"]

DEFAULT_EOS_CONCURRENCY = (1, 32)


async def run_exactly_once_bench(
    target: BenchTarget,
    *,
    concurrency: Sequence[int] = DEFAULT_EOS_CONCURRENCY,
    payload_bytes: int = 128,
    txn_size: int = 4,
    **timing: Unpack[Timing],
) -> dict[str, Any]:
    run = new_run()
    schedule = Schedule.of(timing)
    config = target.pulsar_config()
    payload = b"x" * payload_bytes
    idempotent_cells: list[dict[str, Any]] = []
    txn_cells: list[dict[str, Any]] = []
    async with target.wal_services(f"/bench-{run}", config) as (tso, opener):
        for conc in concurrency:
            plain = await open_wal(opener, f"bench-plain-{run}-{conc}", tso.allocator(), 1)
            numbered = await open_wal(opener, f"bench-idem-{run}-{conc}", tso.allocator(), 1)
            try:
                cell = await _idempotent_cell(plain, numbered, payload, conc, schedule)
            finally:
                await plain.close()
                await numbered.close()
            idempotent_cells.append(cell)
            target.progress(
                f"exactly-once x{conc:<3}: plain {cell['plain']['per_s']:>8.0f}/s idempotent "
                f"{cell['idempotent']['per_s']:>8.0f}/s ratio {cell['throughput_ratio']}"
            )
            wal = await open_wal(opener, f"bench-txn-{run}-{conc}", tso.allocator(), 1)
            try:
                txn_cell = await _txn_cell(wal, payload, conc, schedule.seconds, txn_size)
            finally:
                await wal.close()
            txn_cells.append(txn_cell)
            target.progress(
                f"transactions x{conc:<3}: {txn_cell['committed_per_s']:>7.0f} committed/s "
                f"({txn_cell['messages_per_s']:.0f} messages/s), commit p99 "
                f"{txn_cell['commit']['p99_ms']} ms"
            )
    return {
        **schedule.figures(),
        "payload_bytes": payload_bytes,
        "txn_size": txn_size,
        "idempotent": idempotent_cells,
        "transactions": txn_cells,
    }


async def _idempotent_cell(
    plain: WAL, numbered: WAL, payload: bytes, conc: int, schedule: Schedule
) -> dict[str, Any]:
    producer_id = secrets.randbits(63)
    sequence = itertools.count()

    async def idempotent_append(data: bytes) -> object:
        # numbered when called: calls reach the WAL in that order, as a client's would
        msg = MutableMessage(MessageType.INSERT, data).with_producer(producer_id, next(sequence))
        return await numbered.append(msg)

    sides = {
        "plain": appending(wal_appender(plain), payload, conc),
        "idempotent": appending(idempotent_append, payload, conc),
    }
    runs = await interleaved(sides, schedule)
    p, i = median_of(runs["plain"]), median_of(runs["idempotent"])
    return {
        "concurrency": conc,
        "plain": p,
        "idempotent": i,
        **ratios(i, p, ("per_s", "p99_ms")),
    }


async def _txn_cell(
    wal: WAL, payload: bytes, conc: int, seconds: float, txn_size: int
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    commits: list[float] = []
    committed = 0

    async def writer() -> None:
        nonlocal committed
        while loop.time() < deadline:
            txn = await wal.begin_txn("v")
            await asyncio.gather(
                *(
                    wal.append(MutableMessage(MessageType.INSERT, payload, "v", txn_id=txn))
                    for _ in range(txn_size)
                )
            )
            started = time.perf_counter()
            await wal.commit_txn(txn)
            commits.append(time.perf_counter() - started)
            committed += 1

    started = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(conc)))
    elapsed = time.perf_counter() - started
    return {
        "concurrency": conc,
        "committed": committed,
        "committed_per_s": round(committed / elapsed, 1),
        "messages_per_s": round(committed * txn_size / elapsed, 1),
        "commit": distribution(commits),
    }
