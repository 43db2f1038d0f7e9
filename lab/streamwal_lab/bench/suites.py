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
from streamwal.node.config import FRONTS
from streamwal_lab.bench.append import DEFAULT_CONCURRENCY, DEFAULT_PAYLOADS, run_append_bench
from streamwal_lab.bench.auth import run_auth_bench
from streamwal_lab.bench.channels import DEFAULT_CHANNELS, run_channels_bench
from streamwal_lab.bench.exactly_once import DEFAULT_EOS_CONCURRENCY, run_exactly_once_bench
from streamwal_lab.bench.failover import PROFILES, run_failover_bench
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
    """The suite's measurement, given the parsed options."""


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


def _sizes(p: argparse.ArgumentParser, flag: str, defaults: tuple[int, ...], what: str) -> None:
    """A comma-separated list of positive integers (sizes, counts) the suite sweeps."""
    p.add_argument(
        flag, type=_ints, default=list(defaults), help=f"{what} (default {_joined(defaults)})"
    )


def _timed(p: argparse.ArgumentParser, *, repeats: int = 3, per: str = "cell") -> None:
    """The timed runs' length and how many of them, interleaved, make a figure."""
    p.add_argument("--seconds", type=seconds, default=2.0, help="seconds per timed run")
    p.add_argument("--repeats", type=count, default=repeats, help=f"interleaved runs per {per}")


def _read_back(p: argparse.ArgumentParser) -> None:
    """The suites that fill one channel and read it back several ways."""
    p.add_argument("--messages", type=count, default=20_000, help="messages to read back")
    p.add_argument("--repeats", type=count, default=3, help="reads of each kind")


_Run = Callable[[BenchTarget, argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]


def _calling(
    run: Callable[..., Coroutine[Any, Any, dict[str, Any]]], *same: str, **renamed: str
) -> _Run:
    """A suite's run: ``run(target, ...)`` with the parsed options as keywords, each
    of ``same`` under its own name, each of ``renamed`` (keyword=option) under another."""
    names = {**{name: name for name in same}, **renamed}

    async def call(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
        return await run(
            target, **{keyword: getattr(a, option) for keyword, option in names.items()}
        )

    return call


def _append_args(p: argparse.ArgumentParser) -> None:
    _sizes(p, "--payloads", DEFAULT_PAYLOADS, "payload sizes in bytes")
    _sizes(p, "--concurrency", DEFAULT_CONCURRENCY, "concurrent appenders")
    _timed(p, repeats=5)


def _open_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--opens", type=count, default=100, help="opens of each kind")
    p.add_argument("--outage", type=seconds, default=1.0, help="broker outage in seconds")
    p.add_argument(
        "--outage-repeats", type=count_or_zero, default=3, help="opens across an outage (0: none)"
    )


def _takeover_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--takeovers", type=count, default=50, help="takeovers of each kind")
    p.add_argument("--appenders", type=count, default=4, help="appenders busy on the old owner")


def _channels_args(p: argparse.ArgumentParser) -> None:
    _sizes(p, "--channels", DEFAULT_CHANNELS, "open channels per point")
    p.add_argument("--seconds", type=seconds, default=3.0, help="seconds of appends per point")
    p.add_argument("--idle", type=seconds, default=2.0, help="idle window in seconds")
    p.add_argument(
        "--min-appenders",
        type=count,
        default=32,
        help="appenders spread over the channels (at least one per channel)",
    )


def _node_args(p: argparse.ArgumentParser) -> None:
    _sizes(p, "--payloads", DEFAULT_NODE_PAYLOADS, "payload sizes in bytes")
    _sizes(p, "--concurrency", DEFAULT_NODE_CONCURRENCY, "concurrent callers")
    _timed(p, repeats=5)
    p.add_argument("--messages", type=count, default=10_000, help="messages to read back")
    p.add_argument("--consume-repeats", type=count, default=3, help="reads of each kind")


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
    _sizes(
        p, "--concurrency", DEFAULT_EOS_CONCURRENCY, "concurrent appenders / transaction writers"
    )
    _timed(p)
    p.add_argument("--txn-size", type=count, default=4, help="messages per transaction")


def _failover_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=count, default=3, help="node processes")
    p.add_argument("--channels", type=count, default=6, help="channels written")
    p.add_argument(
        "--kills", type=count_or_zero, default=20, help="nodes killed, one after another"
    )
    p.add_argument("--lease-ttl", type=count, default=2, help="the tuned profile's lease TTL")
    p.add_argument("--grace", type=seconds_or_zero, default=1.0, help="the tuned profile's grace")
    p.add_argument("--no-rolling", action="store_true", help="skip the rolling restart")
    p.add_argument(
        "--settings",
        choices=[*PROFILES, "both"],
        default="both",
        help="the product's defaults, the short tuned settings, or both in turn",
    )


async def _failover(target: BenchTarget, a: argparse.Namespace) -> dict[str, Any]:
    return await run_failover_bench(
        target,
        nodes=a.nodes,
        channels=a.channels,
        kills=a.kills,
        lease_ttl_s=a.lease_ttl,
        grace_s=a.grace,
        rolling=not a.no_rolling,
        profiles=PROFILES if a.settings == "both" else (a.settings,),
    )


def _pipelined_args(p: argparse.ArgumentParser) -> None:
    _sizes(p, "--payloads", DEFAULT_PIPELINED_PAYLOADS, "payload sizes in bytes")
    p.add_argument("--batch", type=count, default=256, help="messages per batch call")
    p.add_argument("--callers", type=count, default=4, help="concurrent batch callers")
    p.add_argument(
        "--no-pack-appends",
        dest="pack_appends",
        action="store_false",
        help="the WAL and the node with wal.pack_appends off (one entry per message)",
    )
    _timed(p)


def _node_channels_args(p: argparse.ArgumentParser) -> None:
    _sizes(p, "--channels", DEFAULT_NODE_CHANNELS, "channels the appenders are spread over")
    p.add_argument("--min-appenders", type=count, default=32, help="appenders, at least one each")
    _timed(p, per="point")


def _large_args(p: argparse.ArgumentParser) -> None:
    _sizes(p, "--sizes", DEFAULT_LARGE_SIZES, "message sizes in bytes")
    _sizes(p, "--concurrency", DEFAULT_LARGE_CONCURRENCY, "concurrent callers")
    p.add_argument(
        "--raw-message-bytes",
        type=count,
        default=DEFAULT_RAW_MESSAGE_BYTES,
        help=f"the raw producer's message size (default {DEFAULT_RAW_MESSAGE_BYTES})",
    )
    _timed(p)


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
    _sizes(p, "--payloads", DEFAULT_LOAD_PAYLOADS, "carried cell: payload sizes")
    p.add_argument("--streams", type=count, default=32, help="carried cell: streams")
    p.add_argument(
        "--depth", type=count, default=16, help="carried and channels cells: appends in flight"
    )
    _sizes(p, "--large-sizes", DEFAULT_LOAD_LARGE_SIZES, "large cell: message sizes, up to 5 MiB")
    p.add_argument("--large-callers", type=count, default=4, help="large cell: callers")
    _sizes(p, "--channels", DEFAULT_LOAD_CHANNELS, "channels cell: channel counts")
    p.add_argument(
        "--min-appenders",
        type=count,
        default=32,
        help="channels cell: streams (one a channel at least)",
    )
    p.add_argument("--batch", type=count, default=256, help="batches cell: messages per call")
    p.add_argument("--batch-callers", type=count, default=4, help="batches cell: callers")
    p.add_argument(
        "--front",
        choices=FRONTS,
        default="python",
        help="what serves the nodes' clients (node.front: python, the default, or native)",
    )
    _timed(p)


_append = _calling(run_append_bench, "payloads", "concurrency", "seconds", "repeats")
_open = _calling(run_open_bench, "opens", outage_s="outage", outage_repeats="outage_repeats")
_takeover = _calling(run_takeover_bench, "takeovers", "appenders")
_channels = _calling(run_channels_bench, "channels", "seconds", "min_appenders", idle_s="idle")
_scan = _calling(run_scan_bench, "messages", "repeats")
_node = _calling(
    run_node_bench,
    "payloads",
    "concurrency",
    "seconds",
    "repeats",
    consume_messages="messages",
    consume_repeats="consume_repeats",
)
_exactly_once = _calling(run_exactly_once_bench, "concurrency", "seconds", "repeats", "txn_size")
_pipelined = _calling(
    run_pipelined_bench, "payloads", "batch", "callers", "seconds", "repeats", "pack_appends"
)
_reads = _calling(run_reads_bench, "messages", "repeats")
_node_channels = _calling(
    run_node_channels_bench, "channels", "min_appenders", "seconds", "repeats"
)
_large = _calling(
    run_large_bench, "sizes", "concurrency", "raw_message_bytes", "seconds", "repeats"
)


def _auth_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--callers", type=count, default=32, help="callers, one Produce in flight each")
    _timed(p)


_auth = _calling(run_auth_bench, "callers", "seconds", "repeats")
_node_load = _calling(
    run_node_load_bench,
    "cells",
    "callers",
    "payloads",
    "streams",
    "depth",
    "large_sizes",
    "large_callers",
    "channels",
    "min_appenders",
    "batch",
    "batch_callers",
    "front",
    "seconds",
    "repeats",
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
            "scan", "catch-up from Pulsar vs tail from the write-ahead buffer", _read_back, _scan
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
            _read_back,
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
            "auth",
            "unary Produce at 32 callers on a node with auth.enabled vs one without",
            _auth_args,
            _auth,
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
