"""A run's report: one JSON document (every figure) and its Markdown tables.

The module stays whole past 500 lines: it is a renderer per suite, each a few dozen
lines over the same table helpers, and the one place a report's layout is read.

NaN (a ratio without a denominator) is written as ``null`` so the JSON stays valid.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamwal_lab.bench.cpu import CPU_KEY

__all__ = ["clean", "markdown", "write"]


def clean(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by ``None``, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if digits == 0 and abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.{max(digits, 2)}f}" if isinstance(value, float) else str(value)
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    rule = "|---|" + "".join("---:|" for _ in header[1:])
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def _append_md(r: dict[str, Any]) -> list[str]:
    rows = [
        [
            c["payload_bytes"],
            c["concurrency"],
            c["raw"]["per_s"],
            c["wal"]["per_s"],
            c["throughput_ratio"],
            c["raw"]["p50_ms"],
            c["wal"]["p50_ms"],
            c["raw"]["p99_ms"],
            c["wal"]["p99_ms"],
            c["p99_ratio"],
            c["raw"]["p999_ms"],
            c["wal"]["p999_ms"],
            c["wal"].get("gc_pause_ms"),
        ]
        for c in r["cells"]
    ]
    read_back = sum(c.get("wal_segments_read_back", 0) for c in r["cells"])
    read_again = sum(c.get("wal_segments_read_again", 0) for c in r["cells"])
    unplaced = sum(c.get("wal_segments_unplaced", 0) for c in r["cells"])
    head = [
        f"{r['repeats']} interleaved runs of {r['seconds_per_run']:g} s per cell, medians; "
        "latencies in ms; WAL GC ms: time in the garbage collector during a WAL run. "
        f"WAL segments read back (a batch closed twice while one was sent), all cells: "
        f"{read_back} (attempts started over: {read_again}); left with an unknown "
        f"position: {unplaced}.",
        "",
    ]
    return head + _table(
        [
            "payload B",
            "appenders",
            "raw/s",
            "WAL/s",
            "WAL/raw",
            "raw p50",
            "WAL p50",
            "raw p99",
            "WAL p99",
            "p99 WAL/raw",
            "raw p999",
            "WAL p999",
            "WAL GC ms",
        ],
        rows,
    )


def _dist_rows(label: str, d: dict[str, Any]) -> list[Any]:
    return [label, d.get("n"), d.get("p50_ms"), d.get("p90_ms"), d.get("p99_ms"), d.get("max_ms")]


def _open_md(r: dict[str, Any]) -> list[str]:
    outage = r["outage"]
    lines = _table(
        ["ms", "n", "p50", "p90", "p99", "max"],
        [
            _dist_rows("raw create producer + send", r["raw_create_and_send"]),
            _dist_rows("WAL open to ready (first time tick)", r["wal_open_to_ready"]),
        ],
    )
    lines += [
        f"WAL/raw: p50 {_fmt(r['p50_ratio'])}, p99 {_fmt(r['p99_ratio'])}.",
        "",
        f"Broker unreachable for {outage['outage_s']:g} s (client operation timeout "
        f"{outage['operation_timeout_s']:g} s): ready "
        + ", ".join(f"{o['ready_after_broker_back_ms']:.0f}" for o in outage["runs"])
        + f" ms after it came back (median {_fmt(outage['ready_after_broker_back_ms_median'])}).",
        "",
    ]
    return lines


def _takeover_md(r: dict[str, Any]) -> list[str]:
    rows = []
    for mode in ("wal", "raw"):
        side = r[mode]
        rows.append(_dist_rows(f"{mode}: new owner ready", side["open"]))
        rows.append(_dist_rows(f"{mode}: new owner's first append", side["first_append"]))
        rows.append(_dist_rows(f"{mode}: old owner's append fails", side["old_owner_fails"]))
    lines = [
        f"{r['takeovers']} takeovers each, {r['appenders_on_old_owner']} appenders busy on the "
        "old owner; ms from the new owner's open call.",
        "",
    ]
    lines += _table(["ms", "n", "p50", "p90", "p99", "max"], rows)
    for mode in ("wal", "raw"):
        if r[mode]["failed_takeovers"]:
            lines += [
                f"**{mode}: {r[mode]['failed_takeovers']} takeover(s) failed**: "
                + "; ".join(r[mode]["failure_errors"]),
                "",
            ]
    lines += [
        "Old owner errors: WAL "
        + ", ".join(r["wal"]["old_owner_errors"])
        + "; raw "
        + ", ".join(r["raw"]["old_owner_errors"])
        + ".",
        "",
    ]
    return lines


def _channels_md(r: dict[str, Any]) -> list[str]:
    rows = [
        [
            p["channels"],
            p["appenders"],
            p["wal"]["throughput"]["per_s"],
            p["raw"]["throughput"]["per_s"],
            p["throughput_ratio"],
            p["wal"]["throughput"]["p99_ms"],
            p["raw"]["throughput"]["p99_ms"],
            p["wal"]["rss_per_channel_mib"],
            p["raw"]["rss_per_channel_mib"],
            p["wal"]["idle"]["persisted_ticks_in_window_max"],
            p["wal"]["idle"]["idle_cpu_percent"],
            p["raw"]["idle"]["idle_cpu_percent"],
            p["wal"]["open_all_s"],
        ]
        for p in r["points"]
    ]
    idle = r["points"][0]["wal"]["idle"] if r["points"] else {}
    lines = [
        f"{r['seconds']:g} s of {r['payload_bytes']} B appends; idle window "
        f"{r['idle_s']:g} s = {_fmt(idle.get('intervals'))} time-tick intervals; "
        "one process per point.",
        "",
    ]
    return lines + _table(
        [
            "channels",
            "appenders",
            "WAL/s",
            "raw/s",
            "WAL/raw",
            "WAL p99 ms",
            "raw p99 ms",
            "WAL MiB/ch",
            "raw MiB/ch",
            "idle ticks/ch in window",
            "idle CPU % WAL",
            "idle CPU % raw",
            "open all s",
        ],
        rows,
    )


def _scan_md(r: dict[str, Any]) -> list[str]:
    per_s = r["per_s"]
    lines = [
        f"{r['messages']} messages of {r['payload_bytes']} B appended in batches (packed; "
        f"{r['entries_read']} with time ticks), as many of the same size written by the raw "
        f"producer to a channel of its own, median of {r['repeats']}.",
        "",
    ]
    lines += _table(
        ["path", "messages/s"],
        [
            ["raw reader, raw producer's channel (Pulsar batching; messages)",
             per_s.get("raw_batched")],
            ["WAL catch-up from Pulsar (read-only WAL)", per_s["catch_up"]],
            ["WAL tail from the write-ahead buffer", per_s["buffer_tail"]],
            [f"raw reader, the WAL's channel (entries/s, {r.get('raw_entries', '-')} entries)",
             per_s["raw_reader"]],
        ],
    )  # fmt: skip
    ratios = (
        f"catch-up/raw producer's channel {_fmt(r.get('catch_up_vs_raw_batched_ratio'))}; "
        f"catch-up/raw entries of the WAL's channel {_fmt(r['catch_up_vs_raw_ratio'])}; "
        f"buffer/catch-up {_fmt(r['buffer_vs_catch_up_ratio'])}."
    )
    return [*lines, ratios, ""]


def _node_md(r: dict[str, Any]) -> list[str]:
    rows = []
    for c in r["cells"]:
        wal = c["wal"]
        rows.append(
            [c["payload_bytes"], c["concurrency"], "WAL direct", wal["per_s"], "-",
             wal["p50_ms"], wal["p99_ms"], "-"]
        )  # fmt: skip
        for side, label in (("unary", "Produce"), ("stream", "ProduceStream")):
            f = c[side]
            rows.append(
                [c["payload_bytes"], c["concurrency"], label, f["per_s"],
                 c[f"{side}_throughput_ratio"], f["p50_ms"], f["p99_ms"], c[f"{side}_p99_ratio"]]
            )  # fmt: skip
        for kind, what in (("echo", "gRPC echo"), ("ceiling", "gRPC echo after the WAL's latency")):
            for side in ("unary", "stream"):
                f = c.get(f"{kind}_{side}")
                if f is not None:  # reports made before the floor or ceiling lack it
                    rows.append(
                        [c["payload_bytes"], c["concurrency"], f"{what}, {side}", f["per_s"],
                         c[f"{kind}_{side}_throughput_ratio"], f["p50_ms"], f["p99_ms"], "-"]
                    )  # fmt: skip
    lines = [
        f"One node in a child process, driven through NodeClient; {r['repeats']} interleaved "
        f"runs of {r['seconds_per_run']:g} s per cell (WAL direct, Produce, ProduceStream with "
        "one stream per caller, and a gRPC echo server with nothing behind it, called the "
        "same ways: the floor of what gRPC costs; the same server answering after the WAL's "
        "mean latency of the repeat: the most a node whose WAL cost no CPU could reach, the "
        "ceiling of the node/WAL targets here), medians; latencies in ms; ratios to the "
        "WAL direct.",
        "",
    ]
    lines += _table(
        ["payload B", "callers", "path", "appends/s", "node/WAL", "p50", "p99", "p99 node/WAL"],
        rows,
    )
    c = r["consume"]
    lines += _table(
        ["read back", "messages/s"],
        [
            [f"Consume through the node ({c['messages']} inserts of {c['payload_bytes']} B)",
             c["node_per_s"]],
            ["ConsumeBatch through the node", c.get("node_batch_per_s", "-")],
            ["WAL scanner, same size, directly", c["wal_per_s"]],
        ],
    )  # fmt: skip
    batch = c.get("node_batch_vs_wal_ratio")
    tail = f"; ConsumeBatch node/WAL {_fmt(batch)}" if batch is not None else ""
    return [*lines, f"Consume node/WAL {_fmt(c['node_vs_wal_ratio'])}{tail}.", ""]


def _pipelined_md(r: dict[str, Any]) -> list[str]:
    rows = [
        [c["payload_bytes"], side, c[side]["per_s"], c.get(f"{side}_vs_raw_ratio", 1.0),
         c[side].get("batch_p99_ms", "-")]
        for c in r["cells"]
        for side in ("raw", "wal", "node")
    ]  # fmt: skip
    lines = [
        f"raw: a send_async loop; WAL: append_many; node: ProduceBatch (child process); "
        f"{r['callers']} callers x batches of {r['batch']}; {r['repeats']} interleaved runs "
        f"of {r['seconds_per_run']:g} s, medians.",
        "",
    ]
    return lines + _table(["payload B", "path", "messages/s", "vs raw", "batch p99 ms"], rows)


def _reads_md(r: dict[str, Any]) -> list[str]:
    per_s, tail = r["per_s"], r["tail_per_s"]
    if "raw_batched" not in per_s:  # a report from before the raw producer's channel
        per_s = {**per_s, "raw_batched": None}
    batched = r.get("catch_up_vs_raw_batched_ratio")
    rows = [
        ["raw reader, raw producer's channel (Pulsar batching; messages)",
         per_s["raw_batched"], 1.0 if batched is not None else "-"],
        ["WAL catch-up (read-only WAL)", per_s["catch_up"], batched],
        ["Consume through the node", per_s["consume"], r.get("consume_vs_raw_batched_ratio")],
        ["ConsumeBatch through the node", per_s["consume_batch"],
         r.get("consume_batch_vs_raw_batched_ratio")],
        ["raw reader, the WAL's channel (counts entries: packs)", per_s["raw_reader"], "-"],
        ["tail: raw reader (entries)", tail["raw_reader"], 1.0],
        ["tail: ConsumeBatch through the node", tail["consume_batch"], r["tail_vs_raw_ratio"]],
    ]  # fmt: skip
    lines = [
        f"{r['messages']} messages of {r['payload_bytes']} B written through the node "
        "(packed); as many of the same size written by the raw producer to a channel of "
        f"its own; medians of {r['repeats']} interleaved reads, messages/s (time ticks "
        'included); "vs raw": against the raw reader of the raw producer\'s channel.',
        "",
    ]
    ratios = (
        f"Against the raw reader of the WAL's own channel (entries/s): catch-up "
        f"{_fmt(r['catch_up_vs_raw_ratio'])}, ConsumeBatch "
        f"{_fmt(r['consume_batch_vs_raw_ratio'])}."
    )
    return [*lines, *_table(["path", "messages/s", "vs raw"], rows), ratios, ""]


def _verify_md(r: dict[str, Any]) -> list[str]:
    channels = [("packed", r)]
    if "unpacked" in r:
        channels.append(("one message per entry", r["unpacked"]))
    rows = []
    for label, f in channels:
        per_s = f["per_s"]
        entries = f.get("entries", "-")
        rows += [
            [f"{label}: raw Pulsar reader (no decoding; entries)", entries,
             per_s["raw_reader"], 1.0, 1.0, None, None],
            [f"{label}: streamwal verify (child process; messages)",
             f.get("messages_verified", "-"), per_s["verify"], f["verify_vs_raw_ratio"],
             f.get("entries_ratio"), f["verify_peak_rss_mb"], f["verify_work_mb"]],
        ]  # fmt: skip
    lines = [
        f"{r['messages']} inserts of {r['payload_bytes']} B in each channel, written once: "
        f"packed (a WAL's append_many, batches of {r.get('pack_batch', '-')}) and, if "
        "shown, one message per entry; medians of "
        f"{r['repeats']} interleaved reads (verify timed from its start to its exit). "
        "The raw reader counts Pulsar messages, which are the topic's entries (a pack is "
        'one); verify counts the WAL\'s messages. "vs raw": messages/s against the raw '
        "reader's; \"time vs raw\": entries/s against entries/s (the raw reader's time "
        "over verify's).",
        "",
    ]
    return lines + _table(
        ["reader", "read", "per s", "vs raw", "time vs raw", "peak RSS MB", "disk MB"], rows
    )


def _node_channels_md(r: dict[str, Any]) -> list[str]:
    rows = [
        [p["channels"], p["appenders"], p["raw"]["per_s"], p["node"]["per_s"],
         p["node_vs_raw_ratio"], p.get("ceiling_vs_raw_ratio"), p["raw"]["p999_ms"],
         p["node"]["p999_ms"]]
        for p in r["points"]
    ]  # fmt: skip
    lines = [
        f"Appenders spread round-robin over the channels, one ProduceStream each (node in a "
        f"child process) or raw producers; {r['repeats']} interleaved runs of "
        f"{r['seconds_per_run']:g} s, medians. Ceiling: as many streams to a gRPC echo "
        "server answering after the raw side's mean latency (a node whose channels cost "
        "no CPU), against raw.",
        "",
    ]
    return lines + _table(
        [
            "channels",
            "appenders",
            "raw/s",
            "node/s",
            "node/raw",
            "ceiling/raw",
            "p999 raw",
            "p999 node",
        ],
        rows,
    )


def _tso_md(r: dict[str, Any]) -> list[str]:
    rows = [[k, v] for k, v in r.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    return _table(["figure", "value"], rows)


def _exactly_once_md(r: dict[str, Any]) -> list[str]:
    rows = [
        [
            c["concurrency"],
            _fmt(c["plain"]["per_s"]),
            _fmt(c["idempotent"]["per_s"]),
            c["throughput_ratio"],
            c["plain"]["p99_ms"],
            c["idempotent"]["p99_ms"],
        ]
        for c in r["idempotent"]
    ]
    lines = _table(
        ["appenders", "plain/s", "idempotent/s", "ratio", "plain p99 ms", "idempotent p99 ms"],
        rows,
    )
    txn_rows = [
        [
            c["concurrency"],
            _fmt(c["committed_per_s"]),
            _fmt(c["messages_per_s"]),
            c["commit"].get("p50_ms"),
            c["commit"].get("p99_ms"),
        ]
        for c in r["transactions"]
    ]
    txn_header = [
        "writers",
        "committed txns/s",
        f"messages/s ({r['txn_size']} a txn)",
        "commit p50 ms",
        "commit p99 ms",
    ]
    return [*lines, *_table(txn_header, txn_rows)]


def _failover_md(r: dict[str, Any]) -> list[str]:
    lines = [
        f"{r['nodes']} nodes, {r['channels']} channels written through ClusterClient; "
        f"{r['kills']} kills (SIGKILL) per profile.",
        "",
    ]
    for name, p in r["profiles"].items():
        lines += [
            f"**{name}**: lease TTL {p['lease_ttl_s']} s, grace {p['grace_s']:g} s; "
            f"bound {p['bound_s']:g} s for every kill.",
            "",
        ]
        lines += _table(
            ["ms", "n", "p50", "p90", "p99", "max"],
            [
                _dist_rows("kill to first append on the new owner", p["kill_to_first_append"]),
                _dist_rows("rolling restart: longest gap per channel", p["rolling_restart_gap"]),
            ],
        )
        lines += [
            f"Within the bound: {p['within_bound']} of "
            f"{p['kill_to_first_append'].get('n', 0)}. {p['acks']} appends acknowledged, "
            f"{p['unknown_outcomes']} with an unknown outcome; history checker: "
            f"{p['history_violations']} violations.",
            "",
        ]
    return lines


def _large_md(r: dict[str, Any]) -> list[str]:
    rows = [
        [c["message_bytes"] // (1024 * 1024), c["concurrency"], side, c[side]["mb_per_s"],
         c.get(f"{side}_vs_raw_ratio", 1.0), c[side]["p50_ms"], c[side]["p99_ms"]]
        for c in r["cells"]
        for side in ("raw", "wal", "node")
    ]  # fmt: skip
    lines = [
        f"raw: the producer writing each message's bytes as "
        f"{r['raw_message_bytes'] // 1024} KiB messages, sent at once; WAL: one append "
        f"(chunked); node: one Produce (child process); {r['repeats']} interleaved runs of "
        f"{r['seconds_per_run']:g} s, medians; MB = 10^6 bytes.",
        "",
    ]
    return lines + _table(
        ["message MiB", "callers", "path", "MB/s", "vs raw", "p50 ms", "p99 ms"], rows
    )


def _large_floor(c: dict[str, Any]) -> list[Any]:
    """The echo's MB/s, the ceiling's ratio and both CPU figures ("-" in reports made
    before they were measured)."""
    if "echo" not in c:
        return ["-", "-", c["node"].get(CPU_KEY, "-"), "-"]
    return [c["echo"]["mb_per_s"], c["ceiling_vs_raw_ratio"], c["node"][CPU_KEY],
            c["echo"][CPU_KEY]]  # fmt: skip


def _node_load_md(r: dict[str, Any]) -> list[str]:
    lines = [
        f"Two nodes in child processes: default trace sampling (node) and every call "
        f"traced (100 %); {r['repeats']} interleaved runs of {r['seconds_per_run']:g} s per "
        "cell, medians; latencies in ms; CPU: microseconds of the serving process per "
        "append (per message in batches).",
        "",
    ]
    lat = r.get("latency")
    if lat is not None:
        rows = [["WAL direct", lat["wal"]["per_s"], "-", lat["wal"]["p50_ms"],
                 lat["wal"]["p99_ms"], "-", "-", "-", "-"]]  # fmt: skip
        for kind, label in (("unary", "Produce"), ("stream", "ProduceStream")):
            for node, sampling in (("node", ""), ("node_full", ", 100 %")):
                side = f"{node}_{kind}"
                f = lat[side]
                rows.append(
                    [f"{label}{sampling}", f["per_s"], lat[f"{side}_vs_wal_ratio"], f["p50_ms"],
                     f["p99_ms"], lat[f"{side}_added_p50_ms"], lat[f"{side}_added_p99_ms"],
                     f[CPU_KEY], lat[f"{side}_cpu_vs_echo_ratio"]]
                )  # fmt: skip
            calls = lat.get("node_calls_unary")  # reports made before it lack it
            if kind == "unary" and calls is not None:
                side = "node_calls_unary"
                rows.append(
                    ["Produce, a call per append", calls["per_s"], lat[f"{side}_vs_wal_ratio"],
                     calls["p50_ms"], calls["p99_ms"], lat[f"{side}_added_p50_ms"],
                     lat[f"{side}_added_p99_ms"], calls[CPU_KEY],
                     lat[f"{side}_cpu_vs_echo_ratio"]]
                )  # fmt: skip
            echo = lat[f"echo_{kind}"]
            rows.append(
                [f"gRPC echo, {kind}", echo["per_s"], "-", echo["p50_ms"], echo["p99_ms"],
                 "-", "-", echo[CPU_KEY], "-"]
            )  # fmt: skip
        top = lat.get("ceiling_unary")
        if top is not None:  # reports made before the ceiling lack it
            rows.append(
                ["gRPC echo after the WAL's latency, unary (ceiling)", top["per_s"],
                 lat["ceiling_unary_vs_wal_ratio"], top["p50_ms"], top["p99_ms"], "-", "-",
                 "-", "-"]
            )  # fmt: skip
        lines += [f"Latency: {lat['callers']} callers, one append in flight each, "
                  f"{lat['payload_bytes']} B; added: node minus WAL direct.", ""]  # fmt: skip
        lines += _table(
            ["path", "appends/s", "/WAL", "p50", "p99", "added p50", "added p99",
             "CPU us", "CPU/echo"],
            rows,
        )  # fmt: skip
    carried = r.get("carried", [])
    if carried:
        lines += [f"Carried load: {r['streams']} streams x {r['depth']} appends in flight "
                  "against the WAL with as many in flight.", ""]  # fmt: skip
        lines += _table(
            ["payload B", "WAL/s", "node/s", "node/WAL", "100 %/s", "100 %/WAL",
             "CPU us", "CPU us 100 %", "frame per append/s", "/WAL"],
            [[c["payload_bytes"], c["wal"]["per_s"], c["node"]["per_s"], c["node_vs_wal_ratio"],
              c["node_full"]["per_s"], c["node_full_vs_wal_ratio"], c["node"][CPU_KEY],
              c["node_full"][CPU_KEY], *_frame_per_append(c, "wal")] for c in carried],
        )  # fmt: skip
    large = r.get("large", [])
    if large:
        lines += [f"Large messages: {r['large_callers']} callers, Produce against the raw "
                  "producer; MB = 10^6 bytes. Echo: the gRPC echo server taking the same "
                  "bytes, answering at once (CPU per call: what receiving them costs a "
                  "process); ceiling: answering after the raw producer's mean latency.",
                  ""]  # fmt: skip
        lines += _table(
            ["message KiB", "raw MB/s", "node MB/s", "node/raw", "100 % MB/s", "100 %/raw",
             "node p99 ms", "raw p99 ms", "echo MB/s", "ceiling/raw", "CPU us", "echo CPU us"],
            [[c["message_bytes"] // 1024, c["raw"]["mb_per_s"], c["node"]["mb_per_s"],
              c["node_vs_raw_ratio"], c["node_full"]["mb_per_s"], c["node_full_vs_raw_ratio"],
              c["node"]["p99_ms"], c["raw"]["p99_ms"], *_large_floor(c)] for c in large],
        )  # fmt: skip
    channels = r.get("channels", [])
    if channels:
        lines += [f"Many channels, pipelined: streams spread over the channels, "
                  f"{r['depth']} appends in flight each, against as many raw producers.",
                  ""]  # fmt: skip
        lines += _table(
            ["channels", "streams", "raw/s", "node/s", "node/raw", "100 %/s", "100 %/raw",
             "frame per append/s", "/raw"],
            [[p["channels"], p["appenders"], p["raw"]["per_s"], p["node"]["per_s"],
              p["node_vs_raw_ratio"], p["node_full"]["per_s"], p["node_full_vs_raw_ratio"],
              *_frame_per_append(p, "raw")]
             for p in channels],
        )  # fmt: skip
    b = r.get("batches")
    if b is not None:
        lines += [f"Batches: {b['callers']} callers x {b['batch']} messages of "
                  f"{b['payload_bytes']} B (ProduceBatch, WAL.append_many).", ""]  # fmt: skip
        lines += _table(
            ["path", "messages/s", "/WAL", "batch p99 ms", "CPU us"],
            [["WAL append_many", b["wal"]["per_s"], "-", b["wal"]["batch_p99_ms"], "-"],
             ["node", b["node"]["per_s"], b["node_vs_wal_ratio"], b["node"]["batch_p99_ms"],
              b["node"][CPU_KEY]],
             ["node, 100 %", b["node_full"]["per_s"], b["node_full_vs_wal_ratio"],
              b["node_full"]["batch_p99_ms"], b["node_full"][CPU_KEY]]],
        )  # fmt: skip
    return lines


def _auth_md(r: dict[str, Any]) -> list[str]:
    lines = [
        f"{r['callers']} callers, one unary Produce of {r['payload_bytes']} B in flight each, "
        f"on a node with auth.enabled (a bearer token checked on every call) and one "
        f"without; {r['repeats']} interleaved runs of {r['seconds_per_run']:g} s, medians.",
        "",
    ]
    return lines + _table(
        ["node", "appends/s", "p50 ms", "p99 ms", "CPU us/append"],
        [[side, r[side]["per_s"], r[side]["p50_ms"], r[side]["p99_ms"], r[side][CPU_KEY]]
         for side in ("auth_off", "auth_on")]
        + [["on/off", r["auth_on_vs_off_ratio"], r["auth_on_p50_vs_off_ratio"], "-",
            r["auth_on_cpu_vs_off_ratio"]]],
    )  # fmt: skip


_SECTIONS: dict[str, tuple[str, Callable[[dict[str, Any]], list[str]]]] = {
    "append": ("Append: WAL vs raw producer", _append_md),
    "open": ("Open to ready", _open_md),
    "takeover": ("Takeover", _takeover_md),
    "channels": ("Many channels on one node", _channels_md),
    "scan": ("Scan", _scan_md),
    "tso": ("TSO", _tso_md),
    "node": ("Through the node (gRPC)", _node_md),
    "exactly-once": ("Exactly once: idempotent appends, transactions", _exactly_once_md),
    "failover": ("Failover in a self-managing cluster", _failover_md),
    "pipelined": ("Pipelined: batches vs a send_async loop", _pipelined_md),
    "reads": ("Read paths vs a raw reader", _reads_md),
    "node-channels": ("Many channels through the node", _node_channels_md),
    "large-messages": ("Large messages: chunked appends vs raw 1 MiB sends", _large_md),
    "node-load": ("A node at load, default and full trace sampling", _node_load_md),
    "auth": ("Auth on vs off: unary Produce", _auth_md),
    "verify": ("streamwal verify on a long channel vs a raw reader", _verify_md),
}


def markdown(report: dict[str, Any]) -> str:
    """The report's tables; headings one level below the page's."""
    m, v = report["machine"], report["versions"]
    lines = [
        f"Run {report['started_at']} ({report['duration_s']:.0f} s): {m['cpus']} CPUs "
        f"({m['cpu_model']}), {m['memory_mib']} MiB, Python {m['python']}; "
        f"pulsar-client {v['pulsar_client']}, Pulsar broker {v['pulsar_broker'] or '?'}, "
        f"etcd {v['etcd'] or '?'}.",
        "",
    ]
    if report["targets"]:
        # the column of figures measured beside on a node tracing every call, if any were
        beside = any(t.get("full_sampling") is not None for t in report["targets"])
        lines += ["### Targets", ""]
        lines += _table(
            ["suite", "target", "bound", "this run", "met", "ceiling here"]
            + (["100 % sampling"] if beside else []),
            [
                [t["suite"], t["name"], t["bound"], t["value"], t["met"], t.get("ceiling")]
                + ([t.get("full_sampling")] if beside else [])
                for t in report["targets"]
            ],
        )
    for name, result in report["suites"].items():
        title, render = _SECTIONS[name]
        lines += [f"### {title}", "", *render(result)]
    return "\n".join(lines)


def write(report: dict[str, Any], out_dir: Path, stem: str) -> tuple[Path, Path]:
    """``<stem>.json`` and ``<stem>.md`` in ``out_dir`` (created); their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(clean(report), indent=2, sort_keys=True) + "\n")
    md_path.write_text(markdown(report) + "\n")
    return json_path, md_path


def _frame_per_append(cell: dict[str, Any], base: str) -> list[object]:
    """The cell's streams without coalescing (absent from runs before that side)."""
    side = cell.get("node_frames")
    if side is None:
        return ["-", "-"]
    return [side["per_s"], cell[f"node_frames_vs_{base}_ratio"]]
