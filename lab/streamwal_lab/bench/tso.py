"""The TSO benchmark: the ``tso`` suite of ``streamwal bench``.

:func:`handler` runs it alone on parsed :func:`add_arguments` and prints the figures
(one JSON object with ``--json``), without the bench's report files.

Measures, on a real etcd under a fresh key prefix:

- ``local_allocator_per_s``: ``allocate()`` from cached ranges (batch ``--batch``);
- ``oracle_generate_per_s``: ``generate(1)`` on the in-process oracle, no caching;
- ``grpc_batched_c{N}_per_s``: timestamps/s through the gRPC service with N concurrent
  callers sharing one allocator that fetches ``--batch`` at a time;
- ``grpc_unbatched_c{N}_rpc_per_s``: one RPC per timestamp, N concurrent callers;
- ``fetch_{inprocess,grpc}_p50_ms`` / ``_p99_ms``: latency of an ``allocate()`` that
  has to fetch (after ``sync()``).

Client and server share one process and event loop, so the gRPC figures include
both sides' CPU. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from streamwal.argtypes import count, seconds
from streamwal.errors import StreamwalError
from streamwal.tso.allocator import LocalAllocator
from streamwal.tso.config import EtcdConfig, TsoConfig
from streamwal.tso.etcd_store import EtcdStore
from streamwal.tso.inprocess import InProcessTSO
from streamwal.tso.remote import RemoteSource
from streamwal.tso.service import TsoServer
from streamwal_lab.stack.ports import ETCD_ENDPOINT as STACK_ETCD_ENDPOINT

__all__ = ["add_arguments", "handler", "run", "run_tso_bench"]

_CHECK_EVERY = 512  # iterations between clock reads in tight loops


async def _rate(op: Callable[[], Awaitable[object]], duration_s: float, per_op: int = 1) -> float:
    """Operations per second of ``op`` run back to back for about ``duration_s``."""
    done = 0
    start = time.perf_counter()
    end = start + duration_s
    while True:
        for _ in range(_CHECK_EVERY):
            await op()
        done += _CHECK_EVERY
        now = time.perf_counter()
        if now >= end:
            return done * per_op / (now - start)


async def _concurrent_rate(
    op: Callable[[], Awaitable[object]], callers: int, duration_s: float
) -> float:
    """Total operations per second of ``callers`` tasks each looping on ``op``."""
    counts = [0] * callers
    stop_at = time.perf_counter() + duration_s

    async def caller(i: int) -> None:
        while time.perf_counter() < stop_at:
            for _ in range(64):
                await op()
            counts[i] += 64

    start = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    return sum(counts) / (time.perf_counter() - start)


async def _fetch_latencies(allocator: LocalAllocator, samples: int) -> tuple[float, float]:
    """p50 and p99 (ms) of ``allocate()`` right after ``sync()``."""
    lat: list[float] = []
    for _ in range(samples):
        await allocator.sync()
        t0 = time.perf_counter()
        await allocator.allocate()
        lat.append((time.perf_counter() - t0) * 1000.0)
    lat.sort()
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    return p50, p99


async def run(
    *,
    etcd_endpoints: Sequence[str] = (STACK_ETCD_ENDPOINT,),
    key_prefix: str | None = None,
    duration_s: float = 1.0,
    batch_size: int = 1000,
    concurrency: Sequence[int] = (1, 4, 16),
    latency_samples: int = 300,
) -> dict[str, Any]:
    """Run every measurement once and return the figures (see the module docstring)."""
    prefix = key_prefix or f"/streamwal-bench/{uuid.uuid4().hex[:12]}"
    try:
        return await _run(
            prefix, etcd_endpoints, duration_s, batch_size, concurrency, latency_samples
        )
    finally:
        if key_prefix is None:  # our own fresh prefix: leave nothing behind
            async with EtcdStore(etcd_endpoints) as store:
                with contextlib.suppress(StreamwalError):
                    await store.delete_prefix(prefix + "/", timeout=2.0)


async def _run(
    prefix: str,
    etcd_endpoints: Sequence[str],
    duration_s: float,
    batch_size: int,
    concurrency: Sequence[int],
    latency_samples: int,
) -> dict[str, Any]:
    config = TsoConfig(
        etcd=EtcdConfig(tuple(etcd_endpoints)), key_prefix=prefix, batch_size=batch_size
    )
    results: dict[str, Any] = {
        "etcd": ",".join(config.etcd.endpoints),
        "key_prefix": prefix,
        "batch_size": batch_size,
        "duration_s": duration_s,
    }
    async with InProcessTSO(config) as tso:
        local = tso.allocator()
        results["local_allocator_per_s"] = round(await _rate(local.allocate, duration_s))
        oracle = tso.oracle
        results["oracle_generate_per_s"] = round(await _rate(oracle.generate, duration_s))
        p50, p99 = await _fetch_latencies(local, latency_samples)
        results["fetch_inprocess_p50_ms"] = round(p50, 4)
        results["fetch_inprocess_p99_ms"] = round(p99, 4)

        async with TsoServer(oracle, "127.0.0.1:0") as server:
            for callers in concurrency:
                remote = RemoteSource(server.address)
                async with LocalAllocator(remote, batch_size, close_source=True) as shared:
                    await shared.allocate()  # connect before timing
                    rate = await _concurrent_rate(shared.allocate, callers, duration_s)
                results[f"grpc_batched_c{callers}_per_s"] = round(rate)
            for callers in concurrency:
                remote = RemoteSource(server.address)
                try:
                    await remote.fetch(1)

                    async def one_rpc(source: RemoteSource = remote) -> int:
                        return await source.fetch(1)

                    rate = await _concurrent_rate(one_rpc, callers, duration_s)
                finally:
                    await remote.close()
                results[f"grpc_unbatched_c{callers}_rpc_per_s"] = round(rate)
            remote = RemoteSource(server.address)
            async with LocalAllocator(remote, batch_size, close_source=True) as grpc_alloc:
                await grpc_alloc.allocate()
                p50, p99 = await _fetch_latencies(grpc_alloc, latency_samples)
            results["fetch_grpc_p50_ms"] = round(p50, 4)
            results["fetch_grpc_p99_ms"] = round(p99, 4)
        results["oracle_stats"] = {
            k: v for k, v in vars(oracle.stats).items() if isinstance(v, int)
        }
    return results


run_tso_bench = run
"""The entry point ``streamwal bench tso`` calls (same as :func:`run`)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--etcd",
        action="append",
        metavar="HOST:PORT",
        help=f"etcd endpoint(s) (default: {STACK_ETCD_ENDPOINT})",
    )
    parser.add_argument("--prefix", help="key prefix (default: a fresh one per run)")
    parser.add_argument("--duration", type=seconds, default=1.0, help="seconds per figure")
    parser.add_argument("--batch", type=count, default=1000, help="allocator batch size")
    parser.add_argument(
        "--samples", type=count, default=300, help="fetches timed for each latency figure"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def handler(args: argparse.Namespace) -> int:
    """Run the benchmark from parsed arguments and print the figures; the exit code."""
    endpoints = [
        e.strip() for item in (args.etcd or [STACK_ETCD_ENDPOINT]) for e in item.split(",") if e
    ]
    try:
        results = asyncio.run(
            run(
                etcd_endpoints=endpoints,
                key_prefix=args.prefix,
                duration_s=args.duration,
                batch_size=args.batch,
                latency_samples=args.samples,
            )
        )
    except StreamwalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(results, sort_keys=True))
    else:
        for key, value in results.items():
            if isinstance(value, int) and not isinstance(value, bool):
                print(f"{key:36} {value:>14,}")
            elif isinstance(value, float):
                print(f"{key:36} {value:>14}")
            else:
                print(f"{key:36} {value}")
    return 0
