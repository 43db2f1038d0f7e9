"""``streamwal bench [append|open|tso] [--json]``: figures and ratios from one run."""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
from typing import Any

from node.bench.append import run_append_bench
from node.bench.open import run_open_bench
from node.stack import Stack

__all__ = ["register"]


def register(sub: Any) -> None:
    bench = sub.add_parser("bench", help="benchmarks: WAL against the raw client, same run")
    suites = bench.add_subparsers(dest="suite", metavar="SUITE", required=True)
    append = suites.add_parser("append", help="appends/s and latency, WAL vs raw producer")
    append.add_argument("--payloads", default="128,4096", help="payload sizes in bytes")
    append.add_argument("--concurrency", default="1,32", help="concurrent appenders")
    append.add_argument("--seconds", type=float, default=2.0, help="seconds per timed run")
    append.add_argument("--repeats", type=int, default=3, help="interleaved runs per cell")
    append.add_argument("--json", action="store_true", help="print one JSON object")
    append.set_defaults(func=_append)
    opens = suites.add_parser("open", help="open-to-ready latency, WAL vs raw")
    opens.add_argument("--opens", type=int, default=100)
    opens.add_argument("--outage", type=float, default=1.0, help="broker outage in seconds")
    opens.add_argument("--json", action="store_true")
    opens.set_defaults(func=_open)
    from tso import bench as tso_bench

    tso_bench.register(suites)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _machine() -> dict[str, Any]:
    import os

    import pulsar

    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "pulsar_client": pulsar.__version__ if hasattr(pulsar, "__version__") else "",
    }


def _emit(name: str, results: dict[str, Any], as_json: bool) -> None:
    results = {"suite": name, "machine": _machine(), **results}
    if as_json:
        print(json.dumps(results, sort_keys=True))
    else:
        print(json.dumps(results, indent=2, sort_keys=True))


def _append(args: argparse.Namespace) -> int:
    info = asyncio.run(Stack().up(["etcd", "pulsar"]))
    results = asyncio.run(
        run_append_bench(
            info.pulsar_url,
            info.etcd_endpoint,
            payloads=_ints(args.payloads),
            concurrency=_ints(args.concurrency),
            seconds=args.seconds,
            repeats=args.repeats,
            progress=_progress,
        )
    )
    if not args.json:
        print(
            f"{'payload':>8} {'conc':>5} {'raw/s':>10} {'wal/s':>10} {'ratio':>6} "
            f"{'raw p99':>8} {'wal p99':>8} {'p99 ratio':>9}"
        )
        for c in results["cells"]:
            print(
                f"{c['payload_bytes']:>8} {c['concurrency']:>5} {c['raw']['per_s']:>10.0f} "
                f"{c['wal']['per_s']:>10.0f} {c['throughput_ratio']:>6} "
                f"{c['raw']['p99_ms']:>8} {c['wal']['p99_ms']:>8} {c['p99_ratio']:>9}"
            )
        return 0
    _emit("append", results, True)
    return 0


def _open(args: argparse.Namespace) -> int:
    info = asyncio.run(Stack().up(["etcd", "pulsar"]))
    results = asyncio.run(
        run_open_bench(
            info.pulsar_url,
            info.etcd_endpoint,
            opens=args.opens,
            outage_s=args.outage,
            progress=_progress,
        )
    )
    _emit("open", results, args.json)
    return 0
