"""The suites ``streamwal bench`` knows, in the order a full run takes them.

Each suite declares its own options and runs from parsed arguments; a full run uses
every suite's defaults (:func:`default_arguments`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from streamwal.argtypes import count, count_or_zero, seconds, seconds_or_zero
from streamwal_lab.bench.append import DEFAULT_CONCURRENCY, DEFAULT_PAYLOADS, run_append_bench
from streamwal_lab.bench.channels import DEFAULT_CHANNELS, run_channels_bench
from streamwal_lab.bench.exactly_once import DEFAULT_EOS_CONCURRENCY, run_exactly_once_bench
from streamwal_lab.bench.failover import run_failover_bench
from streamwal_lab.bench.large import (
    DEFAULT_LARGE_CONCURRENCY,
    DEFAULT_LARGE_SIZES,
    DEFAULT_RAW_MESSAGE_BYTES,
    run_large_bench,
)
from streamwal_lab.bench.node import (
    DEFAULT_NODE_CONCURRENCY,
    DEFAULT_NODE_PAYLOADS,
    run_node_bench,
)
from streamwal_lab.bench.node_channels import DEFAULT_NODE_CHANNELS, run_node_channels_bench
from streamwal_lab.bench.node_load import (
    CELLS,
    DEFAULT_LOAD_CHANNELS,
    DEFAULT_LOAD_LARGE_SIZES,
    DEFAULT_LOAD_PAYLOADS,
    run_node_load_bench,
)
from streamwal_lab.bench.open import run_open_bench
from streamwal_lab.bench.pipelined import DEFAULT_PIPELINED_PAYLOADS, run_pipelined_bench
from streamwal_lab.bench.reads import run_reads_bench
from streamwal_lab.bench.scan import run_scan_bench
from streamwal_lab.bench.takeover import run_takeover_bench
from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.bench.verify import run_verify_bench

__all__ = ["SUITES", "Suite", "default_arguments"]


@dataclass(frozen=True)
class Suite:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[BenchTarget, argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"need positive integers, got {text!r}")
    return values


def _joined(values: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in values)


def _append_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--payloads",
        type=_ints,
        default=list(DEFAULT_PAYLOADS),
        help=f"payload sizes in bytes (default {_joined(DEFAULT_PAYLOADS)})",
    )
    p.add_argument(
        "--concurrency",
        type=_ints,
        default=list(DEFAULT_CONCURRENCY),
        help=f"concurrent appenders (default {_joined(DEFAULT_CONCURRENCY)})",
    )
    p.add_argument("--seconds", type=seconds, default=2.0, help="seconds per timed run")
    p.add_argument("--repeats", type=count, default=5, help="interleaved runs per cell")


async def _append(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_append_bench(
        target,
        payloads=a.payloads,
        concurrency=a.concurrency,
        seconds=a.seconds,
        repeats=a.repeats,
    )


def _open_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--opens", type=count, default=100, help="opens of each kind")
    p.add_argument("--outage", type=seconds, default=1.0, help="broker outage in seconds")
    p.add_argument(
        "--outage-repeats", type=count_or_zero, default=3, help="opens across an outage (0: none)"
    )


async def _open(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_open_bench(
        target, opens=a.opens, outage_s=a.outage, outage_repeats=a.outage_repeats
    )


def _takeover_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--takeovers", type=count, default=50, help="takeovers of each kind")
    p.add_argument("--appenders", type=count, default=4, help="appenders busy on the old owner")


async def _takeover(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_takeover_bench(target, takeovers=a.takeovers, appenders=a.appenders)


def _channels_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--channels",
        type=_ints,
        default=list(DEFAULT_CHANNELS),
        help=f"open channels per point (default {_joined(DEFAULT_CHANNELS)})",
    )
    p.add_argument("--seconds", type=seconds, default=3.0, help="seconds of appends per point")
    p.add_argument("--idle", type=seconds, default=2.0, help="idle window in seconds")
    p.add_argument(
        "--min-appenders",
        type=count,
        default=32,
        help="appenders spread over the channels (at least one per channel)",
    )


async def _channels(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_channels_bench(
        target,
        channels=a.channels,
        seconds=a.seconds,
        idle_s=a.idle,
        min_appenders=a.min_appenders,
    )


def _scan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--messages", type=count, default=20_000, help="messages to read back")
    p.add_argument("--repeats", type=count, default=3, help="reads of each kind")


async def _scan(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_scan_bench(target, messages=a.messages, repeats=a.repeats)


def _node_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--payloads",
        type=_ints,
        default=list(DEFAULT_NODE_PAYLOADS),
        help=f"payload sizes in bytes (default {_joined(DEFAULT_NODE_PAYLOADS)})",
    )
    p.add_argument(
        "--concurrency",
        type=_ints,
        default=list(DEFAULT_NODE_CONCURRENCY),
        help=f"concurrent callers (default {_joined(DEFAULT_NODE_CONCURRENCY)})",
    )
    p.add_argument("--seconds", type=seconds, default=2.0, help="seconds per timed run")
    p.add_argument("--repeats", type=count, default=5, help="interleaved runs per cell")
    p.add_argument("--messages", type=count, default=10_000, help="messages to read back")
    p.add_argument("--consume-repeats", type=count, default=3, help="reads of each kind")


async def _node(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_node_bench(
        target,
        payloads=a.payloads,
        concurrency=a.concurrency,
        seconds=a.seconds,
        repeats=a.repeats,
        consume_messages=a.messages,
        consume_repeats=a.consume_repeats,
    )


def _tso_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=seconds, default=1.0, help="seconds per figure")
    p.add_argument("--batch", type=count, default=1000, help="allocator batch size")
    p.add_argument("--samples", type=count, default=300, help="fetches per latency figure")


async def _tso(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    from streamwal_lab.bench.tso import run as run_tso_bench

    return await run_tso_bench(
        etcd_endpoints=(target.etcd_endpoint,),
        duration_s=a.duration,
        batch_size=a.batch,
        latency_samples=a.samples,
    )


def _exactly_once_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--concurrency",
        type=_ints,
        default=list(DEFAULT_EOS_CONCURRENCY),
        help=f"concurrent appenders / transaction writers "
        f"(default {_joined(DEFAULT_EOS_CONCURRENCY)})",
    )
    p.add_argument("--seconds", type=seconds, default=2.0, help="seconds per timed run")
    p.add_argument("--repeats", type=count, default=3, help="interleaved runs per cell")
    p.add_argument("--txn-size", type=count, default=4, help="messages per transaction")


async def _exactly_once(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_exactly_once_bench(
        target,
        concurrency=a.concurrency,
        seconds=a.seconds,
        repeats=a.repeats,
        txn_size=a.txn_size,
    )


def _failover_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=count, default=3, help="node processes")
    p.add_argument("--channels", type=count, default=6, help="channels written")
    p.add_argument(
        "--kills", type=count_or_zero, default=20, help="nodes killed, one after another"
    )
    p.add_argument("--lease-ttl", type=count, default=2, help="cluster.lease_ttl_s")
    p.add_argument("--grace", type=seconds_or_zero, default=1.0, help="cluster.grace_period_s")
    p.add_argument("--no-rolling", action="store_true", help="skip the rolling restart")


async def _failover(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_failover_bench(
        target,
        nodes=a.nodes,
        channels=a.channels,
        kills=a.kills,
        lease_ttl_s=a.lease_ttl,
        grace_s=a.grace,
        rolling=not a.no_rolling,
    )


def _pipelined_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--payloads",
        type=_ints,
        default=list(DEFAULT_PIPELINED_PAYLOADS),
        help=f"payload sizes in bytes (default {_joined(DEFAULT_PIPELINED_PAYLOADS)})",
    )
    p.add_argument("--batch", type=count, default=256, help="messages per batch call")
    p.add_argument("--callers", type=count, default=4, help="concurrent batch callers")
    p.add_argument("--seconds", type=seconds, default=2.0, help="seconds per timed run")
    p.add_argument("--repeats", type=count, default=3, help="interleaved runs per cell")


async def _pipelined(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_pipelined_bench(
        target,
        payloads=a.payloads,
        batch=a.batch,
        callers=a.callers,
        seconds=a.seconds,
        repeats=a.repeats,
    )


def _reads_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--messages", type=count, default=20_000, help="messages to read back")
    p.add_argument("--repeats", type=count, default=3, help="reads of each kind")


async def _reads(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_reads_bench(target, messages=a.messages, repeats=a.repeats)


def _node_channels_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--channels",
        type=_ints,
        default=list(DEFAULT_NODE_CHANNELS),
        help=f"channels the appenders are spread over (default {_joined(DEFAULT_NODE_CHANNELS)})",
    )
    p.add_argument("--min-appenders", type=count, default=32, help="appenders, at least one each")
    p.add_argument("--seconds", type=seconds, default=2.0, help="seconds per timed run")
    p.add_argument("--repeats", type=count, default=3, help="interleaved runs per point")


async def _node_channels(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_node_channels_bench(
        target,
        channels=a.channels,
        min_appenders=a.min_appenders,
        seconds=a.seconds,
        repeats=a.repeats,
    )


def _large_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sizes",
        type=_ints,
        default=list(DEFAULT_LARGE_SIZES),
        help=f"message sizes in bytes (default {_joined(DEFAULT_LARGE_SIZES)})",
    )
    p.add_argument(
        "--concurrency",
        type=_ints,
        default=list(DEFAULT_LARGE_CONCURRENCY),
        help=f"concurrent callers (default {_joined(DEFAULT_LARGE_CONCURRENCY)})",
    )
    p.add_argument(
        "--raw-message-bytes",
        type=count,
        default=DEFAULT_RAW_MESSAGE_BYTES,
        help=f"the raw producer's message size (default {DEFAULT_RAW_MESSAGE_BYTES})",
    )
    p.add_argument("--seconds", type=seconds, default=2.0, help="seconds per timed run")
    p.add_argument("--repeats", type=count, default=3, help="interleaved runs per cell")


async def _large(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_large_bench(
        target,
        sizes=a.sizes,
        concurrency=a.concurrency,
        raw_message_bytes=a.raw_message_bytes,
        seconds=a.seconds,
        repeats=a.repeats,
    )


def _cells(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [v for v in values if v not in CELLS]
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"cells among {', '.join(CELLS)}, got {text!r}")
    return values


def _node_load_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cells",
        type=_cells,
        default=list(CELLS),
        help=f"which cells (default {','.join(CELLS)})",
    )
    p.add_argument("--callers", type=count, default=32, help="latency cell: callers")
    p.add_argument(
        "--payloads",
        type=_ints,
        default=list(DEFAULT_LOAD_PAYLOADS),
        help=f"carried cell: payload sizes (default {_joined(DEFAULT_LOAD_PAYLOADS)})",
    )
    p.add_argument("--streams", type=count, default=32, help="carried cell: streams")
    p.add_argument(
        "--depth", type=count, default=16, help="carried and channels cells: appends in flight"
    )
    p.add_argument(
        "--large-sizes",
        type=_ints,
        default=list(DEFAULT_LOAD_LARGE_SIZES),
        help=f"large cell: message sizes, up to 5 MiB "
        f"(default {_joined(DEFAULT_LOAD_LARGE_SIZES)})",
    )
    p.add_argument("--large-callers", type=count, default=4, help="large cell: callers")
    p.add_argument(
        "--channels",
        type=_ints,
        default=list(DEFAULT_LOAD_CHANNELS),
        help=f"channels cell: channel counts (default {_joined(DEFAULT_LOAD_CHANNELS)})",
    )
    p.add_argument(
        "--min-appenders",
        type=count,
        default=32,
        help="channels cell: streams (one a channel at least)",
    )
    p.add_argument("--batch", type=count, default=256, help="batches cell: messages per call")
    p.add_argument("--batch-callers", type=count, default=4, help="batches cell: callers")
    p.add_argument("--seconds", type=seconds, default=2.0, help="seconds per timed run")
    p.add_argument("--repeats", type=count, default=3, help="interleaved runs per cell")


async def _node_load(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_node_load_bench(
        target,
        cells=a.cells,
        callers=a.callers,
        payloads=a.payloads,
        streams=a.streams,
        depth=a.depth,
        large_sizes=a.large_sizes,
        large_callers=a.large_callers,
        channels=a.channels,
        min_appenders=a.min_appenders,
        batch=a.batch,
        batch_callers=a.batch_callers,
        seconds=a.seconds,
        repeats=a.repeats,
    )


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--messages",
        type=count,
        default=1_000_000,
        help="messages in the channel verified (default 1,000,000; 5,000,000 on request)",
    )
    p.add_argument("--payload-bytes", type=count, default=256, help="payload size")
    p.add_argument("--repeats", type=count, default=2, help="interleaved runs of each")


async def _verify(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_verify_bench(
        target, messages=a.messages, payload_bytes=a.payload_bytes, repeats=a.repeats
    )


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite("append", "appends/s and p50/p99/p999, WAL vs raw producer", _append_args, _append),
        Suite(
            "open", "open-to-ready vs raw create-and-send; ready after an outage", _open_args, _open
        ),
        Suite("takeover", "a second node takes a busy channel over", _takeover_args, _takeover),
        Suite(
            "channels",
            "1..256 channels on one node: throughput, memory, idle ticks",
            _channels_args,
            _channels,
        ),
        Suite(
            "scan", "catch-up from Pulsar vs tail from the write-ahead buffer", _scan_args, _scan
        ),
        Suite("tso", "TSO allocations/s and fetch latency", _tso_args, _tso),
        Suite(
            "node",
            "Produce, ProduceStream and Consume through one node's gRPC vs the WAL",
            _node_args,
            _node,
        ),
        Suite(
            "exactly-once",
            "idempotent vs plain appends; committed transactions/s",
            _exactly_once_args,
            _exactly_once,
        ),
        Suite(
            "failover",
            "a self-managing cluster: kill-to-first-append, rolling restart write gap",
            _failover_args,
            _failover,
        ),
        Suite(
            "pipelined",
            "raw send_async loop vs WAL append_many vs node ProduceBatch, messages/s",
            _pipelined_args,
            _pipelined,
        ),
        Suite(
            "reads",
            "catch-up, Consume, ConsumeBatch and tail through the node vs a raw reader",
            _reads_args,
            _reads,
        ),
        Suite(
            "node-channels",
            "appenders spread over 16 and 256 channels of one node vs raw producers",
            _node_channels_args,
            _node_channels,
        ),
        Suite(
            "large-messages",
            "16 MiB messages (chunked): MB/s through the WAL and a node vs raw 1 MiB sends",
            _large_args,
            _large,
        ),
        Suite(
            "node-load",
            "a node at load, default and full trace sampling: added latency, carried load, "
            "large messages, many channels pipelined, batches, CPU per append",
            _node_load_args,
            _node_load,
        ),
        Suite(
            "verify",
            "streamwal verify on a long channel vs a raw reader: messages/s, peak RSS, disk",
            _verify_args,
            _verify,
        ),
    )
}


def default_arguments(suite: Suite) -> argparse.Namespace:
    """The suite's options with their defaults, as a full run uses them."""
    parser = argparse.ArgumentParser(add_help=False)
    suite.add_arguments(parser)
    return parser.parse_args([])
