"""The targets a run is judged by, computed from its own figures (ratios, same run).

A target whose suite did not run is left out; one whose figure is missing (NaN) is
reported as not met.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Target", "evaluate"]


@dataclass(frozen=True)
class Target:
    """One target: what is measured, the bound, the figure of this run, whether it holds.

    ``ceiling``: where the run also measured the most any implementation could reach on
    this machine (a latency-bound ratio's gRPC round trip after the WAL's own latency,
    with no work behind it), that figure; a ceiling below the bound says the target
    cannot be met here, whatever the node does.

    ``full_sampling``: where the run also measured the same figure on a node tracing
    every call, that figure, reported beside and not judged: the bound is for a node as
    deployed (sampling by default), and the reader sees what tracing everything costs.
    """

    suite: str
    name: str
    bound: str
    value: float | None
    met: bool
    ceiling: float | None = None
    full_sampling: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda value, bound: value >= bound,
    "<=": lambda value, bound: value <= bound,
    "<": lambda value, bound: value < bound,
}


def _check(
    suite: str,
    name: str,
    value: float | None,
    op: str,
    bound: float,
    ceiling: float | None = None,
    full_sampling: float | None = None,
) -> Target:
    met = value is not None and not math.isnan(value) and _OPS[op](value, bound)
    return Target(suite, name, f"{op} {bound:g}", value, met, ceiling, full_sampling)


def _append(result: dict[str, Any]) -> list[Target]:
    cells = [c for c in result["cells"] if c["payload_bytes"] == 128 and c["concurrency"] == 32]
    if not cells:
        return []
    cell = cells[0]
    return [
        _check("append", "throughput WAL/raw, 128 B x 32", cell["throughput_ratio"], ">=", 0.9),
        _check("append", "p99 latency WAL/raw, 128 B x 32", cell["p99_ratio"], "<=", 1.2),
        _check("append", "p999 latency WAL/raw, 128 B x 32", cell["p999_ratio"], "<=", 2.0),
    ]


def _open(result: dict[str, Any]) -> list[Target]:
    return [_check("open", "open-to-ready p50 WAL/raw", result["p50_ratio"], "<=", 1.5)]


def _takeover(result: dict[str, Any]) -> list[Target]:
    p99 = result["wal"]["first_append"].get("p99_ms")
    failed = result["wal"]["failed_takeovers"]
    return [
        _check("takeover", "new owner's first append p99 (ms)", p99, "<=", 1000),
        _check("takeover", "failed WAL takeovers", failed, "<=", 0),
    ]


def _channels(result: dict[str, Any]) -> list[Target]:
    points = result["points"]
    ticks = max(p["wal"]["idle"]["persisted_ticks_per_channel_per_interval"] for p in points)
    many = [p for p in points if p["channels"] >= 16] or points
    rss = max(p["wal"]["rss_per_channel_mib"] for p in many)
    return [
        _check("channels", "persisted ticks per idle channel per interval", ticks, "<=", 1),
        _check("channels", "RSS per open channel (MiB), N >= 16", rss, "<", 2),
    ]


def _tso(result: dict[str, Any]) -> list[Target]:
    # gRPC: the best concurrency of the batched runs (one allocator shared by N callers).
    batched = [
        v for k, v in result.items() if k.startswith("grpc_batched_c") and k.endswith("_per_s")
    ]
    return [
        _check(
            "tso", "local allocator timestamps/s", result.get("local_allocator_per_s"), ">=", 1e6
        ),
        _check("tso", "gRPC timestamps/s, batched", max(batched, default=None), ">=", 200_000),
    ]


def _failover(result: dict[str, Any]) -> list[Target]:
    targets: list[Target] = []
    for name, profile in result["profiles"].items():
        kills = profile["kill_to_first_append"]
        targets += [
            _check(
                "failover",
                f"{name}: kill to first append, max (ms), every kill",
                kills.get("max_ms"),
                "<=",
                profile["bound_s"] * 1000,
            ),
            _check(
                "failover",
                f"{name}: history violations",
                profile["history_violations"],
                "<=",
                0,
            ),
        ]
    return targets


def _node(result: dict[str, Any]) -> list[Target]:
    """Judged on a full-size run only (a 128 B x 32 cell), like the append targets."""
    cells = [c for c in result["cells"] if c["payload_bytes"] == 128 and c["concurrency"] == 32]
    if not cells:
        return []
    cell, consume = cells[0], result["consume"]
    return [
        _check("node", "ProduceStream/WAL, 128 B x 32",
               cell["stream_throughput_ratio"], ">=", 0.9,
               cell.get("ceiling_stream_throughput_ratio")),
        _check("node", "Produce/WAL, 128 B x 32", cell["unary_throughput_ratio"], ">=", 0.5,
               cell.get("ceiling_unary_throughput_ratio")),
        _check("node", "ConsumeBatch/WAL scanner",
               consume.get("node_batch_vs_wal_ratio"), ">=", 0.8),
    ]  # fmt: skip


def _pipelined(result: dict[str, Any]) -> list[Target]:
    cells = [c for c in result["cells"] if c["payload_bytes"] == 128]
    if not cells:
        return []
    cell = cells[0]
    return [
        _check("pipelined", "batch appends WAL/raw send_async, 128 B",
               cell["wal_vs_raw_ratio"], ">=", 3.0),
        _check("pipelined", "batch produce node/raw send_async, 128 B",
               cell["node_vs_raw_ratio"], ">=", 2.0),
    ]  # fmt: skip


#: the mark a node aims at beyond its targets: 128 B messages in batches, on two cores
NODE_BATCH_MARK_PER_S = 40_000
#: node-load bounds by carried-load payload size and large-message size (the issue's cells)
CARRIED_BOUNDS = {128: 0.8, 4096: 0.9}
LARGE_BOUNDS = {64 * 1024: 0.9, 1024 * 1024: 0.9}


def _node_load(result: dict[str, Any]) -> list[Target]:
    """Judged on the issue's shapes only (32 callers; 32 streams x 16; the sizes of
    :data:`CARRIED_BOUNDS` and :data:`LARGE_BOUNDS`), every channel count; the default
    sampling node's figure, the full-sampling node's beside. The added latency is the
    node's percentile minus the WAL's: at p50 against the echo server's round trip (the
    least a gRPC hop costs here), at p99 against the WAL's own p99."""
    targets: list[Target] = []
    lat = result.get("latency")
    if lat is not None and lat["callers"] == 32:
        n = lat["callers"]
        for kind, label in (("unary", "Produce"), ("stream", "ProduceStream")):
            side, full = f"node_{kind}", f"node_full_{kind}"
            targets += [
                _check("node-load", f"added p50/echo round trip, {label}, 128 B x {n}",
                       lat[f"{side}_added_p50_vs_echo_ratio"], "<=", 1.5,
                       full_sampling=lat.get(f"{full}_added_p50_vs_echo_ratio")),
                _check("node-load", f"added p99/WAL p99, {label}, 128 B x {n}",
                       lat[f"{side}_added_p99_vs_wal_ratio"], "<=", 2,
                       full_sampling=lat.get(f"{full}_added_p99_vs_wal_ratio")),
            ]  # fmt: skip
        targets += [
            _check("node-load", f"Produce/WAL, 128 B x {n}, default sampling",
                   lat["node_unary_vs_wal_ratio"], ">=", 0.5,
                   lat.get("ceiling_unary_vs_wal_ratio"),
                   full_sampling=lat.get("node_full_unary_vs_wal_ratio")),
            _check("node-load", "node CPU per Produce/echo CPU per call",
                   lat["node_unary_cpu_vs_echo_ratio"], "<=", 1.5,
                   full_sampling=lat.get("node_full_unary_cpu_vs_echo_ratio")),
        ]  # fmt: skip
    for c in result.get("carried", []):
        bound = CARRIED_BOUNDS.get(c["payload_bytes"])
        if bound is not None and (c["streams"], c["depth"]) == (32, 16):
            targets.append(
                _check("node-load", f"carried node/WAL, {c['payload_bytes']} B, 32 x 16",
                       c["node_vs_wal_ratio"], ">=", bound,
                       full_sampling=c.get("node_full_vs_wal_ratio"))
            )  # fmt: skip
    for c in result.get("large", []):
        bound = LARGE_BOUNDS.get(c["message_bytes"])
        if bound is not None:
            targets.append(
                _check("node-load", f"large node/raw MB/s, {c['message_bytes'] // 1024} KiB",
                       c["node_vs_raw_ratio"], ">=", bound, c.get("ceiling_vs_raw_ratio"),
                       full_sampling=c.get("node_full_vs_raw_ratio"))
            )  # fmt: skip
    for p in result.get("channels", []):
        targets.append(
            _check("node-load", f"pipelined node/raw, {p['channels']} channels",
                   p["node_vs_raw_ratio"], ">=", 0.8,
                   full_sampling=p.get("node_full_vs_raw_ratio"))
        )  # fmt: skip
    batches = result.get("batches")
    if batches is not None and batches["payload_bytes"] == 128:
        targets.append(
            _check("node-load", "mark: node messages/s, 128 B in batches",
                   batches["node"]["per_s"], ">=", NODE_BATCH_MARK_PER_S,
                   full_sampling=batches["node_full"]["per_s"])
        )  # fmt: skip
    return targets


#: catch-up reads (the library's and ConsumeBatch's) against a raw reader of as many
#: messages of the same size that the raw producer wrote, messages/s
READS_BOUND = 2.0


def _reads(result: dict[str, Any]) -> list[Target]:
    """Against the raw reader of the raw producer's channel (a report from before it
    has no such figure: not met)."""
    return [
        _check("reads", "WAL catch-up/raw reader of the raw producer's channel",
               result.get("catch_up_vs_raw_batched_ratio"), ">=", READS_BOUND),
        _check("reads", "ConsumeBatch through the node/raw reader of the raw producer's channel",
               result.get("consume_batch_vs_raw_batched_ratio"), ">=", READS_BOUND),
        _check("reads", "ConsumeBatch through the node/WAL catch-up",
               result["consume_batch_vs_catch_up_ratio"], ">=", 0.8),
    ]  # fmt: skip


def _verify(result: dict[str, Any]) -> list[Target]:
    """On the packed channel (as a deployed WAL writes it), whose raw reader counts
    entries; and, when the run has it, on a channel of one message per entry, where
    both count the same messages."""
    bound = result["verify_vs_raw_bound"]
    targets = [
        _check("verify", "verify/raw reader messages/s, packed channel (raw: entries)",
               result["verify_vs_raw_ratio"], ">=", bound),
    ]  # fmt: skip
    unpacked = result.get("unpacked")
    if unpacked is not None:
        targets.append(
            _check("verify", "verify/raw reader messages/s, one message per entry",
                   unpacked["verify_vs_raw_ratio"], ">=", bound)
        )  # fmt: skip
    targets.append(
        _check("verify", "verify peak RSS MB", result["verify_peak_rss_mb"], "<=",
               result["verify_peak_rss_bound_mb"])
    )  # fmt: skip
    return targets


def _node_channels(result: dict[str, Any]) -> list[Target]:
    return [
        _check("node-channels", f"node/raw, {p['channels']} channels",
               p["node_vs_raw_ratio"], ">=", 0.9, p.get("ceiling_vs_raw_ratio"))
        for p in result["points"]
    ]  # fmt: skip


def _auth(result: dict[str, Any]) -> list[Target]:
    """Checking the caller of every call costs at most 5 % of unary Produce at 32 callers."""
    if result["callers"] != 32:
        return []
    return [
        _check("auth", "Produce auth on/off, 128 B x 32", result["auth_on_vs_off_ratio"],
               ">=", 0.95),
    ]  # fmt: skip


_RULES: dict[str, Callable[[dict[str, Any]], list[Target]]] = {
    "append": _append,
    "open": _open,
    "takeover": _takeover,
    "channels": _channels,
    "tso": _tso,
    "failover": _failover,
    "node": _node,
    "pipelined": _pipelined,
    "reads": _reads,
    "node-channels": _node_channels,
    "node-load": _node_load,
    "auth": _auth,
    "verify": _verify,
}


def evaluate(suites: dict[str, Any]) -> list[Target]:
    """Every target whose suite is in ``suites`` (suite name -> its result)."""
    targets: list[Target] = []
    for name, rule in _RULES.items():
        if name in suites:
            targets.extend(rule(suites[name]))
    return targets
