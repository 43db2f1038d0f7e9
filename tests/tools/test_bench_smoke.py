"""``streamwal bench``: every suite runs at minimal size and reports well-formed figures.

Nothing here is timed: the figures are only checked for shape and sign.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from streamwal.cli import main
from streamwal_lab.bench.append import run_append_bench
from streamwal_lab.bench.channels import run_channels_bench
from streamwal_lab.bench.large import LARGE_SIDES, run_large_bench
from streamwal_lab.bench.node import SIDES
from streamwal_lab.bench.open import run_open_bench
from streamwal_lab.bench.report import markdown, write
from streamwal_lab.bench.scan import run_scan_bench
from streamwal_lab.bench.takeover import run_takeover_bench
from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.bench.targets import evaluate
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.topics import list_topics


@pytest.fixture
def target(stack: StackInfo) -> BenchTarget:
    return BenchTarget(stack.pulsar_url, stack.etcd_endpoint, stack.pulsar_admin_url)


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


@pytest.mark.integration
async def test_append_cells_have_both_sides_and_ratios(target: BenchTarget) -> None:
    result = await run_append_bench(
        target, payloads=[128], concurrency=[1, 4], seconds=0.2, repeats=1, warmup_s=0.05
    )
    assert [(c["payload_bytes"], c["concurrency"]) for c in result["cells"]] == [
        (128, 1),
        (128, 4),
    ]
    for cell in result["cells"]:
        for side in ("raw", "wal"):
            figures = cell[side]
            assert figures["ops"] > 0
            assert all(_positive(figures[k]) for k in ("per_s", "p50_ms", "p99_ms", "p999_ms"))
            assert figures["p50_ms"] <= figures["p99_ms"] <= figures["p999_ms"]
        assert _positive(cell["throughput_ratio"]) and _positive(cell["p99_ratio"])
        assert cell["wal_segments_unplaced"] == 0  # nothing left unknown in a quiet run
        assert isinstance(cell["wal_segments_read_back"], int)
    names = {t.name for t in evaluate({"append": result})}
    assert names == set()  # no 128 B x 32 cell: the append targets are not judged


@pytest.mark.integration
async def test_open_reports_both_distributions_and_the_outage(target: BenchTarget) -> None:
    result = await run_open_bench(target, opens=3, outage_s=0.3, outage_repeats=1)
    for key in ("raw_create_and_send", "wal_open_to_ready"):
        assert result[key]["n"] == 3
        assert _positive(result[key]["p50_ms"])
    assert _positive(result["p50_ratio"])
    run = result["outage"]["runs"][0]
    assert run["total_open_ms"] >= 300  # it could not be ready while the broker was away
    assert _positive(run["ready_after_broker_back_ms"])


@pytest.mark.integration
async def test_takeover_fences_the_old_owner_every_round(target: BenchTarget) -> None:
    result = await run_takeover_bench(target, takeovers=2, appenders=2, settle_s=0.05)
    assert result["wal"]["failed_takeovers"] == 0, result["wal"]["failure_errors"]
    for side in ("wal", "raw"):
        assert result[side]["first_append"]["n"] == 2
        assert result[side]["old_owner_never_failed"] == 0
        assert all(
            _positive(result[side][k]["p50_ms"])
            for k in ("open", "first_append", "old_owner_fails")
        )
    assert result["wal"]["old_owner_errors"] == ["ChannelFencedError"]


@pytest.mark.integration
async def test_channels_measure_memory_throughput_and_idle_ticks(target: BenchTarget) -> None:
    result = await run_channels_bench(
        target, channels=[2], seconds=0.3, idle_s=0.6, min_appenders=2
    )
    (point,) = result["points"]
    assert point["channels"] == 2
    for side in ("wal", "raw"):
        assert _positive(point[side]["throughput"]["per_s"])
        assert point[side]["rss_open_mib"] > 0
    idle = point["wal"]["idle"]
    assert idle["persisted_ticks_after_last_append_max"] == 1  # one tick after the data
    assert idle["persisted_ticks_in_window_max"] == 0  # none while idle
    ticks = [t for t in evaluate({"channels": result}) if "ticks" in t.name]
    assert [t.met for t in ticks] == [True]


@pytest.mark.integration
async def test_scan_reads_back_all_three_ways(target: BenchTarget) -> None:
    result = await run_scan_bench(target, messages=200, repeats=1)
    assert all(_positive(v) for v in result["per_s"].values())
    assert result["entries_read"] >= 200
    assert 1 <= result["raw_entries"] < 200  # packed: fewer entries than messages
    assert _positive(result["catch_up_vs_raw_batched_ratio"])
    assert result["buffer_served_from_memory"] is True


@pytest.mark.integration
async def test_large_messages_measure_all_three_sides_and_drop_their_topics(
    target: BenchTarget,
) -> None:
    """One size just above the stock broker's 5 MiB, so the WAL and the node chunk."""
    assert target.pulsar_admin_url is not None
    before = await list_topics(target.pulsar_admin_url)
    result = await run_large_bench(
        target, sizes=[6 * 1024 * 1024], seconds=0.2, repeats=1, warmup_s=0.05
    )
    (cell,) = result["cells"]
    assert cell["raw_messages_per_message"] == 6
    for side in LARGE_SIDES:
        assert cell[side]["ops"] > 0 and _positive(cell[side]["mb_per_s"])
        assert len(cell["runs"][side]) == 1
    assert all(_positive(cell[k]) for k in ("wal_vs_raw_ratio", "node_vs_raw_ratio"))
    assert result["node"]["exit_code"] == 0
    left = {t for t in await list_topics(target.pulsar_admin_url) - before if "large" in t}
    assert left == set()
    doc = {**_synthetic_report(), "suites": {"large-messages": result}}
    assert "| 6 | 1 | node |" in markdown(doc)


@pytest.mark.integration
def test_the_command_writes_json_and_markdown(stack: StackInfo, tmp_path: Path) -> None:
    argv = [
        "bench", "open", "--opens", "2", "--outage", "0.2", "--outage-repeats", "1",
        "--out", str(tmp_path), "--pulsar-url", stack.pulsar_url, "--etcd", stack.etcd_endpoint,
        "--pulsar-admin-url", stack.pulsar_admin_url,
    ]  # fmt: skip
    assert main(argv) == 0
    (json_file,) = tmp_path.glob("bench-*-open.json")
    doc = json.loads(json_file.read_text())
    assert set(doc) >= {"machine", "versions", "suites", "targets", "started_at"}
    assert doc["versions"]["pulsar_client"] and doc["versions"]["pulsar_broker"]
    assert doc["machine"]["cpus"] >= 1
    assert doc["suites"]["open"]["wal_open_to_ready"]["n"] == 2
    assert [t["name"] for t in doc["targets"]] == ["open-to-ready p50 WAL/raw"]
    md = json_file.with_suffix(".md").read_text()
    assert "### Open to ready" in md and "| WAL open to ready" in md


def _printed(
    stack: StackInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> dict[str, Any]:
    """``streamwal bench ARGS --json`` on the stack, which must exit 0: the report it
    printed."""
    argv = [
        "bench", *args, "--json",
        "--out", str(tmp_path), "--pulsar-url", stack.pulsar_url, "--etcd", stack.etcd_endpoint,
    ]  # fmt: skip
    assert main(argv) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


@pytest.mark.integration
def test_tso_command_prints_json_with_its_targets(
    stack: StackInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _printed(stack, tmp_path, capsys, "tso", "--duration", "0.05", "--samples", "5")
    assert doc["failed"] == {}
    tso = doc["suites"]["tso"]
    assert tso["duration_s"] == 0.05
    batched = [k for k in tso if k.startswith("grpc_batched_c")]
    assert set(batched) == {f"grpc_batched_c{n}_per_s" for n in (1, 4, 16)}
    assert all(_positive(tso[k]) for k in ["local_allocator_per_s", *batched])
    assert tso["oracle_stats"]["step_downs"] == 0
    targets = {t["name"]: t for t in doc["targets"]}
    assert set(targets) == {"local allocator timestamps/s", "gRPC timestamps/s, batched"}
    assert targets["local allocator timestamps/s"]["value"] == tso["local_allocator_per_s"]
    assert targets["gRPC timestamps/s, batched"]["value"] == max(tso[k] for k in batched)


@pytest.mark.integration
def test_node_command_reports_grpc_and_wal_figures(
    stack: StackInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sizes = "--concurrency 1,2 --seconds 0.2 --repeats 1 --messages 50 --consume-repeats 1"
    doc = _printed(stack, tmp_path, capsys, "node", *sizes.split())
    assert doc["failed"] == {} and doc["targets"] == []
    result = doc["suites"]["node"]
    assert result["node"]["exit_code"] == 0  # the node stopped gracefully
    cells = result["cells"]
    assert [(c["payload_bytes"], c["concurrency"]) for c in cells] == [(128, 1), (128, 2)]
    for cell in cells:
        for side in SIDES:
            figures = cell[side]
            assert figures["ops"] > 0
            assert all(_positive(figures[k]) for k in ("per_s", "p50_ms", "p99_ms"))
            assert figures["p50_ms"] <= figures["p99_ms"]
        for side in ("unary", "stream"):
            assert _positive(cell[f"{side}_throughput_ratio"])
            assert _positive(cell[f"{side}_p99_ratio"])
            assert _positive(cell[f"ceiling_{side}_throughput_ratio"])
            # the ceiling waited the WAL's mean latency of its repeat before answering
            (wal_run,) = cell["runs"]["wal"]
            (ceiling_run,) = cell["runs"][f"ceiling_{side}"]
            asked_ms = cell["concurrency"] / wal_run["per_s"] * 1000
            assert 0.5 * asked_ms <= ceiling_run["delay_ms"] <= 2 * asked_ms + 2
    consume = result["consume"]
    assert consume["messages"] == 50
    assert all(_positive(consume[k]) for k in ("node_per_s", "wal_per_s", "node_vs_wal_ratio"))
    (md_file,) = tmp_path.glob("bench-*-node.md")
    md = md_file.read_text()
    assert "### Through the node (gRPC)" in md and "| 128 | 2 | ProduceStream |" in md
    assert "| 128 | 2 | gRPC echo after the WAL's latency, stream |" in md


def test_tso_targets_take_the_best_batched_concurrency() -> None:
    result = {
        "local_allocator_per_s": 1_200_000,
        "grpc_batched_c1_per_s": 150_000,
        "grpc_batched_c4_per_s": 210_000,
        "grpc_unbatched_c4_rpc_per_s": 900_000,  # one RPC per timestamp: not this target
    }
    met = {t.name: (t.value, t.met) for t in evaluate({"tso": result})}
    assert met == {
        "local allocator timestamps/s": (1_200_000, True),
        "gRPC timestamps/s, batched": (210_000, True),
    }
    slow = {"local_allocator_per_s": 999_999, "grpc_batched_c1_per_s": 199_999}
    assert [t.met for t in evaluate({"tso": slow})] == [False, False]
    assert [t.met for t in evaluate({"tso": {}})] == [False, False]  # figures missing


def _synthetic_report() -> dict[str, Any]:
    side = {"ops": 10, "per_s": 100.0, "p50_ms": 1.0, "p99_ms": 2.0, "p999_ms": 3.0}
    cells = [
        {
            "payload_bytes": p,
            "concurrency": c,
            "raw": side,
            "wal": {**side, "per_s": 95.0, "gc_pause_ms": 0.0},
            "throughput_ratio": 0.95,
            "p50_ratio": 1.0,
            "p99_ratio": float("nan"),
            "p999_ratio": 1.0,
        }
        for p in (128, 4096)
        for c in (1, 32)
    ]
    return {
        "started_at": "2026-01-01T00:00:00+00:00",
        "duration_s": 1.0,
        "machine": {"cpus": 2, "cpu_model": "x", "memory_mib": 1, "python": "3.11"},
        "versions": {"pulsar_client": "3", "pulsar_broker": "4", "etcd": "3.5"},
        "suites": {"append": {"seconds_per_run": 1, "repeats": 1, "cells": cells}},
        "targets": [],
    }


def _reject(constant: str) -> None:
    raise ValueError(f"not strict JSON: {constant}")


def test_a_missing_figure_fails_its_target_and_stays_valid_json(tmp_path: Path) -> None:
    report = _synthetic_report()
    report["targets"] = [t.as_dict() for t in evaluate(report["suites"])]
    by_name = {t["name"]: t for t in report["targets"]}
    assert by_name["throughput WAL/raw, 128 B x 32"]["met"] is True
    assert by_name["p99 latency WAL/raw, 128 B x 32"]["met"] is False  # NaN: not met
    assert by_name["p999 latency WAL/raw, 128 B x 32"]["met"] is True  # 1.0 <= 2
    json_path, md_path = write(report, tmp_path, "bench-test")
    doc = json.loads(json_path.read_text(), parse_constant=_reject)  # strict: no NaN
    assert doc["suites"]["append"]["cells"][0]["p99_ratio"] is None
    assert "| 128 | 32 |" in md_path.read_text() == markdown(report) + "\n"


def test_plot_writes_readable_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from streamwal_lab.bench.plot import plot

    paths = plot(_synthetic_report(), tmp_path, "bench-test")
    assert sorted(p.name for p in paths) == [
        "bench-test-append-latency.png",
        "bench-test-append-throughput.png",
    ]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
