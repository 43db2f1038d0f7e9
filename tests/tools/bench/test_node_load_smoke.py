"""``streamwal bench node-load`` at minimal size on the real stack: every cell reports
well-formed figures from both nodes, and the suite leaves no topic behind.

Nothing here is timed: the figures are only checked for shape and sign.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from streamwal_lab.bench.cpu import CPU_KEY
from streamwal_lab.bench.node_load import (
    CALLS_SIDE,
    FRAME_PER_APPEND,
    NODES,
    run_node_load_bench,
)
from streamwal_lab.bench.report import markdown
from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.bench.targets import evaluate
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.topics import list_topics

pytestmark = pytest.mark.integration


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _cpu(figures: dict[str, float]) -> bool:
    """A CPU figure (clock ticks: a short run may see none of the process's)."""
    return math.isfinite(figures[CPU_KEY]) and figures[CPU_KEY] >= 0


def _waited_the_mean_latency(
    ceiling: dict[str, float], base: dict[str, float], callers: int
) -> bool:
    """The ceiling's mean wait is the base's closed-loop latency (callers over its rate),
    within the timer's slack: not a default, nor another side's."""
    expected_ms = 1000 * callers / base["per_s"]
    return abs(ceiling["delay_ms"] - expected_ms) <= 0.3 * expected_ms + 1.0


async def test_every_cell_measures_both_nodes_and_drops_its_topics(stack: StackInfo) -> None:
    target = BenchTarget(stack.pulsar_url, stack.etcd_endpoint, stack.pulsar_admin_url)
    before = await list_topics(stack.pulsar_admin_url)
    result = await run_node_load_bench(
        target, callers=32, payloads=[128], streams=2, depth=2, large_sizes=[65536],
        large_callers=1, channels=[2], min_appenders=2, batch=8, batch_callers=1,
        seconds=0.2, repeats=1, warmup_s=0.05,
    )  # fmt: skip
    assert {n: result["nodes"][n]["exit_code"] for n in NODES} == dict.fromkeys(NODES, 0)
    assert result["nodes"]["node_full"]["sampling"] == "always_on"
    lat = result["latency"]
    for side in (
        "wal",
        "echo_unary",
        "echo_stream",
        CALLS_SIDE,
        *(f"{n}_{k}" for n in NODES for k in ("unary", "stream")),
    ):
        assert lat[side]["ops"] > 0 and _positive(lat[side]["per_s"]), side
        assert lat[side]["p50_ms"] <= lat[side]["p99_ms"]
    for side in ("echo_unary", "node_unary", "node_full_unary"):
        assert _positive(lat[side][CPU_KEY]), side  # 32 callers keep each busy for ticks
    assert _positive(lat["node_unary_cpu_vs_echo_ratio"])
    assert math.isfinite(lat["node_unary_added_p50_vs_echo_ratio"])
    (carried,) = result["carried"]
    (large,) = result["large"]
    (channels,) = result["channels"]
    batches = result["batches"]
    for cell, base in ((carried, "wal"), (large, "raw"), (channels, "raw"), (batches, "wal")):
        assert _positive(cell[base]["per_s"])
        for node in NODES:
            assert _positive(cell[node]["per_s"]) and _cpu(cell[node])
            assert _positive(cell[f"{node}_vs_{base}_ratio"])
    for cell, base in ((carried, "wal"), (channels, "raw")):  # streams without coalescing
        assert _positive(cell[FRAME_PER_APPEND]["per_s"]) and _cpu(cell[FRAME_PER_APPEND])
        assert _positive(cell[f"{FRAME_PER_APPEND}_vs_{base}_ratio"])
    assert _positive(large["node"]["mb_per_s"]) and large["raw_messages_per_message"] == 1
    # the floor and ceiling of the large cell, and the unary ceiling of the latency cell;
    # each ceiling waited its base side's mean latency of the same round (one round here)
    assert _positive(large["echo"]["mb_per_s"]) and _cpu(large["echo"])
    assert _positive(large["ceiling"]["mb_per_s"]) and _positive(large["ceiling_vs_raw_ratio"])
    assert _waited_the_mean_latency(large["ceiling"], large["raw"], large["callers"])
    assert _positive(lat["ceiling_unary"]["per_s"]) and _positive(lat["ceiling_unary_vs_wal_ratio"])
    assert _waited_the_mean_latency(lat["ceiling_unary"], lat["wal"], lat["callers"])
    assert channels["appenders"] == 2 and channels["depth"] == 2
    left = {t for t in await list_topics(stack.pulsar_admin_url) - before if "bench-nl" in t}
    assert left == set()
    targets = {t.name: t for t in evaluate({"node-load": result})}
    # the latency cell ran at 32 callers: judged, the full-sampling node's figure beside
    assert targets["Produce/WAL, 128 B x 32, default sampling"].full_sampling is not None
    assert targets["Produce/WAL, 128 B x 32, default sampling"].ceiling is not None
    assert "pipelined node/raw, 2 channels" in targets
    doc = {
        "started_at": "2026-01-01T00:00:00+00:00",
        "duration_s": 1.0,
        "machine": {"cpus": 2, "cpu_model": "x", "memory_mib": 1, "python": "3.11"},
        "versions": {"pulsar_client": "3", "pulsar_broker": "4", "etcd": "3.5"},
        "suites": {"node-load": result},
        "targets": [t.as_dict() for t in targets.values()],
    }
    report = markdown(doc)
    assert "| Produce, 100 % |" in report
    assert "frame per append/s" in report
