"""The side-by-side runner every bench cell uses (streamwal_lab.bench.sides), without a broker."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from streamwal_lab.bench import sides
from streamwal_lab.bench.stats import ratios


def _recording(name: str, calls: list[tuple[str, float]], per_s: float) -> sides.Timed:
    async def timed(seconds: float) -> dict[str, float]:
        calls.append((name, seconds))
        return {"per_s": per_s + len(calls), "p99_ms": 1.0}

    return timed


async def test_every_side_warms_up_once_then_the_sides_take_turns() -> None:
    calls: list[tuple[str, float]] = []
    cell_sides = {"raw": _recording("raw", calls, 10.0), "wal": _recording("wal", calls, 20.0)}
    runs = await sides.interleaved(cell_sides, sides.Schedule(seconds=2.0, repeats=3, warmup_s=0.5))
    assert calls == [
        ("raw", 0.5), ("wal", 0.5),
        ("raw", 2.0), ("wal", 2.0), ("raw", 2.0), ("wal", 2.0), ("raw", 2.0), ("wal", 2.0),
    ]  # fmt: skip
    # the warm-up is not among the figures; each side keeps its runs in order
    assert [r["per_s"] for r in runs["raw"]] == [13.0, 15.0, 17.0]
    assert [r["per_s"] for r in runs["wal"]] == [24.0, 26.0, 28.0]
    assert sides.side_medians(runs) == {
        "raw": {"per_s": 15.0, "p99_ms": 1.0},
        "wal": {"per_s": 26.0, "p99_ms": 1.0},
    }
    assert sides.Schedule(2.0, 3, 0.5).figures() == {
        "seconds_per_run": 2.0,
        "repeats": 3,
        "warmup_s": 0.5,
    }


async def test_a_spread_keeps_one_call_in_flight_per_append_function() -> None:
    in_flight: dict[int, int] = {0: 0, 1: 0}
    most = {0: 0, 1: 0}
    seen: list[bytes] = []

    def append_for(index: int) -> Callable[[bytes], Awaitable[object]]:
        async def append(payload: bytes) -> object:
            in_flight[index] += 1
            most[index] = max(most[index], in_flight[index])
            seen.append(payload)
            await asyncio.sleep(0.002)
            in_flight[index] -= 1
            return None

        return append

    figures = await sides.timed_spread([append_for(0), append_for(1)], b"p", 0.1)
    assert most == {0: 1, 1: 1}
    assert figures["ops"] == len(seen) > 2 and set(seen) == {b"p"}
    assert figures["per_s"] > 0 and 0 < figures["p50_ms"] <= figures["p99_ms"]
    assert (await sides.spread([append_for(0)], b"q")(0.05))["ops"] > 0


class _Echo:
    """Stands in for the echo server: records the wait each delayed run was given."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def timed_after(
        self, delay_s: float, timed: Callable[[], Awaitable[dict[str, float]]]
    ) -> dict[str, float]:
        self.waits.append(delay_s)
        return await timed()


async def test_the_ceiling_waits_the_base_sides_mean_latency_of_its_latest_run() -> None:
    calls: list[tuple[str, float]] = []
    rates = iter([50.0, 400.0, 800.0])

    async def base_run(seconds: float) -> dict[str, float]:
        return {"per_s": next(rates)}

    base = sides.Latest(base_run)
    echo = _Echo()
    cell_sides: dict[str, sides.Timed] = {
        "wal": base,
        "ceiling": sides.after(echo, base, 8, _recording("ceiling", calls, 1.0)),
    }
    await sides.interleaved(cell_sides, sides.Schedule(seconds=1.0, repeats=2, warmup_s=0.1))
    # 8 callers over the base's rate of the run just before each ceiling run
    assert echo.waits == pytest.approx([8 / 50.0, 8 / 400.0, 8 / 800.0])
    assert base.figures == {"per_s": 800.0}


def test_a_side_over_its_base_is_named_after_each_figure() -> None:
    wal = {"per_s": 900.0, "p50_ms": 2.0, "p99_ms": 9.0, "p999_ms": 30.0}
    raw = {"per_s": 1000.0, "p50_ms": 1.0, "p99_ms": 3.0, "p999_ms": 0.0}
    assert ratios(wal, raw) == {
        "throughput_ratio": 0.9,
        "p50_ratio": 2.0,
        "p99_ratio": 3.0,
        "p999_ratio": pytest.approx(float("nan"), nan_ok=True),  # nothing to divide by
    }
    assert list(ratios(wal, raw, ("per_s", "p99_ms"), prefix="unary_")) == [
        "unary_throughput_ratio",
        "unary_p99_ratio",
    ]
