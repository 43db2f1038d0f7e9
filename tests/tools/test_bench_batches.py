"""The pipelined, reads and node-channels suites at minimal size: well-formed figures,
nothing timed."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import pytest

from streamwal_lab.bench.node_channels import run_node_channels_bench
from streamwal_lab.bench.pipelined import SIDES, run_pipelined_bench
from streamwal_lab.bench.reads import PATHS, run_reads_bench
from streamwal_lab.bench.report import markdown
from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.bench.targets import evaluate
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.topics import delete_created, list_topics

pytestmark = pytest.mark.integration


@pytest.fixture
async def target(stack: StackInfo) -> AsyncIterator[BenchTarget]:
    """The local stack; the topics the suite created are deleted after it."""
    before = await list_topics(stack.pulsar_admin_url)
    yield BenchTarget(stack.pulsar_url, stack.etcd_endpoint, stack.pulsar_admin_url)
    await delete_created(stack.pulsar_admin_url, before, lambda t: "/bench-" in t)


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _section(name: str, result: dict[str, Any]) -> str:
    report = {
        "machine": {"cpus": 2, "cpu_model": "test", "memory_mib": 1, "python": "3"},
        "versions": {"pulsar_client": "x", "pulsar_broker": None, "etcd": None},
        "started_at": "now",
        "duration_s": 1,
        "suites": {name: result},
        "targets": [t.as_dict() for t in evaluate({name: result})],
    }
    return markdown(report)


async def test_pipelined_cells_have_three_sides_and_ratios(target: BenchTarget) -> None:
    result = await run_pipelined_bench(
        target, payloads=[128], batch=16, callers=2, seconds=0.2, repeats=1, warmup_s=0.05
    )
    (cell,) = result["cells"]
    for side in SIDES:
        assert cell[side]["messages"] > 0 and _positive(cell[side]["per_s"])
    assert cell["raw"]["failed"] == 0
    assert cell["wal"]["messages"] % 16 == 0 and cell["node"]["messages"] % 16 == 0
    assert _positive(cell["wal_vs_raw_ratio"]) and _positive(cell["node_vs_raw_ratio"])
    assert {t.name for t in evaluate({"pipelined": result})} == {
        "batch appends WAL/raw send_async, 128 B",
        "batch produce node/raw send_async, 128 B",
    }
    assert "| 128 | node |" in _section("pipelined", result)


async def test_reads_report_every_path(target: BenchTarget) -> None:
    result = await run_reads_bench(target, messages=300, repeats=1)
    assert set(result["per_s"]) == set(PATHS)
    assert all(_positive(v) for v in result["per_s"].values())
    assert all(_positive(v) for v in result["tail_per_s"].values())
    assert _positive(result["catch_up_vs_raw_ratio"])
    assert _positive(result["catch_up_vs_raw_batched_ratio"])
    assert _positive(result["consume_batch_vs_raw_batched_ratio"])
    assert _positive(result["tail_vs_raw_ratio"])
    assert len(evaluate({"reads": result})) == 3
    assert "ConsumeBatch through the node" in _section("reads", result)


async def test_node_channels_spread_appenders_over_every_channel(target: BenchTarget) -> None:
    result = await run_node_channels_bench(
        target, channels=[3], min_appenders=4, seconds=0.2, repeats=1, warmup_s=0.05
    )
    (point,) = result["points"]
    assert point["channels"] == 3 and point["appenders"] == 4
    for side in ("node", "raw", "ceiling"):
        assert point[side]["ops"] > 0 and _positive(point[side]["per_s"])
    assert _positive(point["node_vs_raw_ratio"])
    # the ceiling's streams waited the raw side's mean latency (appenders / appends/s)
    (raw_run,) = point["runs"]["raw"]
    (ceiling_run,) = point["runs"]["ceiling"]
    asked_ms = 4 / raw_run["per_s"] * 1000
    assert 0.5 * asked_ms <= ceiling_run["delay_ms"] <= 2 * asked_ms + 2
    assert ceiling_run["p50_ms"] >= 0.5 * asked_ms
    (judged,) = evaluate({"node-channels": result})
    assert judged.name == "node/raw, 3 channels"
    assert judged.ceiling == point["ceiling_vs_raw_ratio"] and _positive(judged.ceiling)
    assert "| 3 | 4 |" in _section("node-channels", result)
