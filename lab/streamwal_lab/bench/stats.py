"""Figures from samples: throughput, percentiles, medians of repeated runs, ratios.

Every figure a suite reports goes through here, so they are rounded and named alike:
latencies in milliseconds (``*_ms``), rates per second (``per_s``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

__all__ = ["distribution", "median_of", "percentile", "ratio", "ratios", "summarize"]


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (NaN without samples)."""
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


def distribution(samples_s: Sequence[float]) -> dict[str, float]:
    """A latency distribution (ms) of individually timed operations (opens, takeovers)."""
    if not samples_s:
        return {"n": 0}
    return {
        "n": len(samples_s),
        "p50_ms": round(percentile(samples_s, 50) * 1000, 2),
        "p90_ms": round(percentile(samples_s, 90) * 1000, 2),
        "p99_ms": round(percentile(samples_s, 99) * 1000, 2),
        "max_ms": round(max(samples_s) * 1000, 2),
        "mean_ms": round(statistics.fmean(samples_s) * 1000, 2),
    }


def median_of(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """The median of each figure across repeated runs (noisy machines)."""
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` rounded; NaN when either is missing or zero below."""
    if not denominator or math.isnan(denominator) or math.isnan(numerator):
        return float("nan")
    return round(numerator / denominator, 3)


def ratios(
    side: Mapping[str, float],
    base: Mapping[str, float],
    keys: Sequence[str] = ("per_s", "p50_ms", "p99_ms", "p999_ms"),
    prefix: str = "",
) -> dict[str, float]:
    """``side``'s figures over ``base``'s, named ``<prefix>throughput_ratio`` for the rate
    and ``<prefix>p50_ratio`` (and so on) for each latency percentile in ``keys``."""
    return {f"{prefix}{_ratio_name(key)}_ratio": ratio(side[key], base[key]) for key in keys}


def _ratio_name(key: str) -> str:
    return "throughput" if key == "per_s" else key.removesuffix("_ms")
