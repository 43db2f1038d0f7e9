"""Figures from latency samples: throughput, percentiles, ratios."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["percentile", "ratio", "summarize"]


def percentile(samples: Sequence[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summarize(latencies_s: Sequence[float], elapsed_s: float) -> dict[str, float]:
    """Throughput and latency percentiles (ms) of one timed run."""
    return {
        "ops": len(latencies_s),
        "per_s": round(len(latencies_s) / elapsed_s, 1) if elapsed_s > 0 else 0.0,
        "p50_ms": round(percentile(latencies_s, 50) * 1000, 3),
        "p99_ms": round(percentile(latencies_s, 99) * 1000, 3),
        "p999_ms": round(percentile(latencies_s, 99.9) * 1000, 3),
    }


def median_of(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """The median of each figure across repeated runs (noisy machines)."""
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}


def ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 3) if denominator else float("nan")
