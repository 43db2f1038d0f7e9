"""The node-load suite's pure parts: CPU accounting, derived figures, targets, report."""

from __future__ import annotations

import math
import os
import time
from typing import Any

import pytest

from streamwal_lab.bench.cpu import CPU_KEY, cpu_seconds, metered, parse_cpu_seconds, per_op_us
from streamwal_lab.bench.node_load import CALLS_SIDE, CELLS, carried_figures, latency_figures
from streamwal_lab.bench.report import markdown
from streamwal_lab.bench.suites import SUITES, default_arguments
from streamwal_lab.bench.targets import evaluate

# a /proc/<pid>/stat line whose command name holds spaces and parentheses; utime 250
# and stime 50 ticks are its 14th and 15th fields
_STAT = (
    "4242 (python (bench) x) S 1 4242 4242 0 -1 4194560 5000 0 0 0 250 50 0 0 20 0 9 0 "
    "100 300000000 20000 18446744073709551615 1 1 0 0 0 0 0 16781312 17642 0 0 0 17 1 0 0"
)


def test_cpu_time_is_read_after_the_command_name() -> None:
    assert parse_cpu_seconds(_STAT, 100) == pytest.approx(3.0)
    assert parse_cpu_seconds(_STAT, 250) == pytest.approx(1.2)
    with pytest.raises(ValueError):
        parse_cpu_seconds("not a stat line", 100)


def test_cpu_per_operation() -> None:
    assert per_op_us(0.5, 1000) == 500.0
    assert per_op_us(0.0, 10) == 0.0
    assert math.isnan(per_op_us(0.5, 0))  # nothing done: no figure, not infinity


def _burn(seconds: float) -> int:
    done, deadline = 0, time.process_time() + seconds
    while time.process_time() < deadline:
        done += 1
    return done


async def test_a_metered_run_adds_the_process_cpu_per_operation() -> None:
    """This process burns CPU inside the run: the meter sees it, per operation."""
    before = cpu_seconds(os.getpid())

    async def timed(seconds: float) -> dict[str, float]:
        _burn(seconds)
        return {"ops": 100.0, "per_s": 100.0 / seconds}

    figures = await metered(os.getpid(), timed)(0.3)
    assert cpu_seconds(os.getpid()) - before >= figures["cpu_s"] - 0.01  # ticks, rounded
    assert figures["cpu_s"] > 0.1
    assert figures[CPU_KEY] == pytest.approx(figures["cpu_s"] / 100 * 1e6, rel=0.05, abs=1)
    assert figures["ops"] == 100.0  # the run's own figures stay

    async def none(seconds: float) -> dict[str, float]:
        return {"messages": 0.0}

    assert math.isnan((await metered(os.getpid(), none, ops_key="messages")(0.0))[CPU_KEY])


def _side(per_s: float, p50: float, p99: float, cpu: float | None = None) -> dict[str, float]:
    side = {"ops": per_s, "per_s": per_s, "p50_ms": p50, "p99_ms": p99, "p999_ms": p99}
    return side if cpu is None else {**side, CPU_KEY: cpu}


def _latency_medians() -> dict[str, dict[str, float]]:
    return {
        "wal": _side(4000, 8.0, 16.0),
        "node_unary": _side(1000, 20.0, 40.0, cpu=600.0),
        "node_stream": _side(3000, 11.0, 20.0, cpu=250.0),
        "node_full_unary": _side(800, 26.0, 60.0, cpu=700.0),
        "node_full_stream": _side(2500, 13.0, 24.0, cpu=300.0),
        "echo_unary": _side(5000, 6.0, 9.0, cpu=200.0),
        "echo_stream": _side(15000, 2.0, 4.0, cpu=50.0),
    }


def test_added_latency_is_the_node_minus_the_wal_against_the_floor() -> None:
    f = latency_figures(_latency_medians())
    assert f["node_unary_added_p50_ms"] == 12.0 and f["node_unary_added_p99_ms"] == 24.0
    assert f["node_unary_added_p50_vs_echo_ratio"] == 2.0  # 12 ms over the echo's 6
    assert f["node_unary_added_p99_vs_wal_ratio"] == 1.5  # 24 ms over the WAL's 16
    assert f["node_stream_added_p50_vs_echo_ratio"] == 1.5  # 3 ms over the stream echo's 2
    assert f["node_unary_vs_wal_ratio"] == 0.25
    assert f["node_unary_cpu_vs_echo_ratio"] == 3.0
    assert f["node_stream_cpu_vs_echo_ratio"] == 5.0  # against the echo's stream, not unary
    assert f["node_full_unary_added_p99_ms"] == 44.0
    assert f["node_full_unary_cpu_vs_echo_ratio"] == 3.5


def test_a_call_per_append_is_judged_against_the_unary_echo() -> None:
    medians = {**_latency_medians(), CALLS_SIDE: _side(500, 30.0, 48.0, cpu=800.0)}
    f = latency_figures(medians)
    assert f[f"{CALLS_SIDE}_vs_wal_ratio"] == 0.125
    assert f[f"{CALLS_SIDE}_added_p50_vs_echo_ratio"] == round(22 / 6, 3)
    assert f[f"{CALLS_SIDE}_cpu_vs_echo_ratio"] == 4.0
    assert f"{CALLS_SIDE}_vs_wal_ratio" not in latency_figures(_latency_medians())


def test_the_unary_ceiling_is_taken_against_the_wal_where_it_was_measured() -> None:
    medians = {**_latency_medians(), "ceiling_unary": _side(2400, 13.0, 20.0)}
    assert latency_figures(medians)["ceiling_unary_vs_wal_ratio"] == 0.6  # 2,400 of 4,000
    assert "ceiling_unary_vs_wal_ratio" not in latency_figures(_latency_medians())


def test_carried_ratios_take_mb_per_s_where_the_cell_has_it() -> None:
    per_s = {"wal": {"per_s": 100.0}, "node": {"per_s": 80.0}, "node_full": {"per_s": 50.0}}
    assert carried_figures(per_s, "wal") == {
        "node_vs_wal_ratio": 0.8,
        "node_full_vs_wal_ratio": 0.5,
    }
    mb = {
        "raw": {"per_s": 10.0, "mb_per_s": 200.0},
        "node": {"per_s": 99.0, "mb_per_s": 190.0},
        "node_full": {"per_s": 1.0, "mb_per_s": 100.0},
    }
    assert carried_figures(mb, "raw") == {"node_vs_raw_ratio": 0.95, "node_full_vs_raw_ratio": 0.5}


def _result(callers: int = 32, streams: int = 32) -> dict[str, Any]:
    medians = _latency_medians()
    lat = {"payload_bytes": 128, "callers": callers, **medians, **latency_figures(medians)}
    side = {**_side(100, 1.0, 2.0, cpu=10.0), "mb_per_s": 6.6, "batch_p99_ms": 3.0}

    def cell(base: str, ratio: float, full: float, **shape: int) -> dict[str, Any]:
        return {
            **shape,
            base: side,
            "node": side,
            "node_full": side,
            f"node_vs_{base}_ratio": ratio,
            f"node_full_vs_{base}_ratio": full,
        }

    return {
        "seconds_per_run": 1.0,
        "repeats": 1,
        "streams": streams,
        "depth": 16,
        "large_callers": 4,
        "latency": lat,
        "carried": [
            cell("wal", 0.85, 0.7, payload_bytes=128, streams=streams, depth=16),
            cell("wal", 0.85, 0.7, payload_bytes=4096, streams=streams, depth=16),
        ],
        "large": [
            cell("raw", 0.95, 0.9, message_bytes=65536, callers=4),
            cell("raw", 0.5, 0.4, message_bytes=1 << 20, callers=4),
            cell("raw", 0.1, 0.1, message_bytes=1000, callers=4),  # not an issue's size
        ],
        "channels": [
            {**cell("raw", 0.81, 0.6, channels=16, appenders=32), "depth": 16},
            {**cell("raw", 0.3, 0.2, channels=256, appenders=256), "depth": 16},
        ],
        "batches": {
            **cell("wal", 0.6, 0.5, payload_bytes=128, batch=256, callers=4),
            "node": {"per_s": 41_000.0, "batch_p99_ms": 1.0, CPU_KEY: 5.0},
            "node_full": {"per_s": 20_000.0, "batch_p99_ms": 2.0, CPU_KEY: 9.0},
            "wal": {"per_s": 50_000.0, "batch_p99_ms": 1.0},
        },
    }


def test_node_load_targets_judge_the_default_node_and_show_full_sampling_beside() -> None:
    targets = {t.name: t for t in evaluate({"node-load": _result()})}
    met = {name: t.met for name, t in targets.items()}
    assert met == {
        "added p50/echo round trip, Produce, 128 B x 32": False,  # 2.0 > 1.5
        "added p99/WAL p99, Produce, 128 B x 32": True,  # 1.5 <= 2
        "added p50/echo round trip, ProduceStream, 128 B x 32": True,  # 1.5 <= 1.5
        "added p99/WAL p99, ProduceStream, 128 B x 32": True,
        "Produce/WAL, 128 B x 32, default sampling": False,  # 0.25 < 0.5
        "node CPU per Produce/echo CPU per call": False,  # 3.0 > 1.5
        "carried node/WAL, 128 B, 32 x 16": True,  # 0.85 >= 0.8
        "carried node/WAL, 4096 B, 32 x 16": False,  # 0.85 < 0.9
        "large node/raw MB/s, 64 KiB": True,
        "large node/raw MB/s, 1024 KiB": False,
        "pipelined node/raw, 16 channels": True,
        "pipelined node/raw, 256 channels": False,
        "mark: node messages/s, 128 B in batches": True,
    }
    assert targets["node CPU per Produce/echo CPU per call"].full_sampling == 3.5
    assert targets["carried node/WAL, 4096 B, 32 x 16"].full_sampling == 0.7
    assert targets["mark: node messages/s, 128 B in batches"].full_sampling == 20_000.0
    assert all(t.ceiling is None for t in targets.values())


def _with_ceilings() -> dict[str, Any]:
    """A result whose latency and large cells measured their floor and ceiling."""
    result = _result()
    lat = result["latency"]
    lat["ceiling_unary"] = _side(2400, 13.0, 20.0)
    lat.update(latency_figures({k: v for k, v in lat.items() if isinstance(v, dict)}))
    for c, top in zip(result["large"], (0.97, 0.7, 0.5), strict=True):
        c["echo"] = {**_side(300, 1.0, 2.0, cpu=400.0), "mb_per_s": 20.0}
        c["ceiling"] = {**_side(90, 1.0, 2.0), "mb_per_s": 5.0}
        c["ceiling_vs_raw_ratio"] = top
    return result


def test_a_ceiling_measured_in_the_run_goes_with_its_target() -> None:
    """Below its bound, a ceiling says the bound cannot be met here (0.7 < 0.9 at
    1 MiB); it does not change whether the node's own figure met it."""
    targets = {t.name: t for t in evaluate({"node-load": _with_ceilings()})}
    assert targets["Produce/WAL, 128 B x 32, default sampling"].ceiling == 0.6
    assert targets["large node/raw MB/s, 64 KiB"].ceiling == 0.97
    assert targets["large node/raw MB/s, 1024 KiB"].ceiling == 0.7
    assert targets["large node/raw MB/s, 1024 KiB"].met is False
    assert targets["large node/raw MB/s, 64 KiB"].met is True
    others = set(targets) - {
        "Produce/WAL, 128 B x 32, default sampling",
        "large node/raw MB/s, 64 KiB",
        "large node/raw MB/s, 1024 KiB",
    }
    assert all(targets[name].ceiling is None for name in others)


def test_the_report_shows_the_floor_and_ceiling_and_reads_reports_without_them() -> None:
    md = markdown(_report({"node-load": _with_ceilings()}))
    assert "| gRPC echo after the WAL's latency, unary (ceiling) | 2,400 | 0.60 |" in md
    assert "| echo MB/s | ceiling/raw | CPU us | echo CPU us |" in md
    node = "| 64 | 6.60 | 6.60 | 0.95 | 6.60 | 0.90 | 2.00 | 2.00 |"
    assert f"{node} 20.00 | 0.97 | 10.00 | 400 |" in md
    old = markdown(_report({"node-load": _result()}))
    assert "(ceiling)" not in old
    assert f"{node} - | - | 10.00 | - |" in old


def test_node_load_targets_need_the_issues_shapes() -> None:
    small = _result(callers=4, streams=4)
    names = {t.name for t in evaluate({"node-load": small})}
    assert not any("x 32" in n or "32 x 16" in n or "CPU" in n for n in names)
    assert evaluate({"node-load": {"latency": None}}) == []  # no cell run: no target
    missing = _result()
    missing["latency"]["node_unary_cpu_vs_echo_ratio"] = float("nan")
    cpu = [t for t in evaluate({"node-load": missing}) if "CPU" in t.name]
    assert [t.met for t in cpu] == [False]  # a missing figure is not met


def _report(suites: dict[str, Any]) -> dict[str, Any]:
    return {
        "started_at": "2026-01-01T00:00:00+00:00",
        "duration_s": 1.0,
        "machine": {"cpus": 2, "cpu_model": "x", "memory_mib": 1, "python": "3.11"},
        "versions": {"pulsar_client": "3", "pulsar_broker": "4", "etcd": "3.5"},
        "suites": suites,
        "targets": [t.as_dict() for t in evaluate(suites)],
    }


def test_the_report_shows_every_cell_and_the_full_sampling_column() -> None:
    md = markdown(_report({"node-load": _result()}))
    assert "### A node at load, default and full trace sampling" in md
    assert "| ProduceStream, 100 % |" in md and "| gRPC echo, unary |" in md
    assert "| 256 | 256 |" in md  # the channels table
    assert "ceiling here | 100 % sampling |" in md
    assert "| node-load | mark: node messages/s, 128 B in batches | >= 40000 | 41,000 | yes" in md
    # reports of other suites keep their targets table as it was
    other = markdown(_report({"open": {"p50_ratio": 1.0, **_open_figures()}}))
    assert "| suite | target | bound | this run | met | ceiling here |" in other
    assert "100 % sampling" not in other


def _open_figures() -> dict[str, Any]:
    dist = {"n": 1, "p50_ms": 1.0, "p90_ms": 1.0, "p99_ms": 1.0, "max_ms": 1.0}
    outage = {"outage_s": 1, "operation_timeout_s": 1, "runs": [],
              "ready_after_broker_back_ms_median": None}  # fmt: skip
    return {"raw_create_and_send": dist, "wal_open_to_ready": dist, "p99_ratio": 1.0,
            "outage": outage}  # fmt: skip


def test_the_suite_runs_every_cell_by_default_and_refuses_unknown_ones() -> None:
    suite = SUITES["node-load"]
    assert default_arguments(suite).cells == list(CELLS)
    import argparse

    parser = argparse.ArgumentParser(exit_on_error=False)
    suite.add_arguments(parser)
    assert parser.parse_args(["--cells", "latency,batches"]).cells == ["latency", "batches"]
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args(["--cells", "latency,nope"])
