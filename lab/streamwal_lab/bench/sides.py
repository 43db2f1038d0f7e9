"""Side-by-side cells: how every suite times the ways it compares, so they compare alike.

A cell puts two or more sides (the raw producer, the WAL, a node, an echo server...) to
the same work. Each side is a :data:`Timed`: given a number of seconds, it runs and
returns its figures. :func:`interleaved` warms every side up once, then runs them in
turn ``repeats`` times, so drift on a noisy machine hits every side alike; the cell's
figures are the medians of those runs (:func:`medians`).

The loops below keep one call in flight per task, back to back (a closed loop): the
latency a caller sees is the time of its own call, and the throughput is what that many
callers get, which is what the suites' ratios compare.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from streamwal.wal.message import MessageType, MutableMessage
from streamwal.wal.wal import WAL
from streamwal_lab.bench.stats import median_of, summarize
from streamwal_lab.bench.target import Timing

__all__ = [
    "Append",
    "Latest",
    "Runs",
    "Schedule",
    "Timed",
    "after",
    "closed_loop",
    "interleaved",
    "side_medians",
    "spread",
    "timed_spread",
    "wal_appender",
]

Append = Callable[[bytes], Awaitable[object]]
Timed = Callable[[float], Awaitable[dict[str, float]]]
#: each side's figures, one entry per repeat
Runs = dict[str, list[dict[str, float]]]


async def closed_loop(
    calls: Sequence[Callable[[], Awaitable[object]]], seconds: float
) -> tuple[list[float], float]:
    """One task per call, each calling it back to back for ``seconds``: every call's
    latency (s) and the elapsed time (s) of the whole run."""
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def worker(call: Callable[[], Awaitable[object]]) -> None:
        while loop.time() < deadline:
            started = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in calls))
    return latencies, time.perf_counter() - started


async def timed_spread(
    appends: Sequence[Append], payload: bytes, seconds: float
) -> dict[str, float]:
    """One task per append function, each appending back to back for ``seconds``."""
    calls = [functools.partial(append, payload) for append in appends]
    return summarize(*await closed_loop(calls, seconds))


def spread(appends: Sequence[Append], payload: bytes) -> Timed:
    """The side that runs :func:`timed_spread` of ``appends``."""

    async def run(seconds: float) -> dict[str, float]:
        return await timed_spread(appends, payload, seconds)

    return run


def wal_appender(wal: WAL) -> Append:
    """An insert of the payload into ``wal``: the WAL side of a cell."""

    async def append(data: bytes) -> object:
        return await wal.append(MutableMessage(MessageType.INSERT, data))

    return append


@dataclass(frozen=True)
class Schedule:
    """How long each timed run of a side lasts (``seconds``), how many runs of each side
    make its figures (``repeats``), after one warm-up run of ``warmup_s``."""

    seconds: float
    repeats: int
    warmup_s: float

    @classmethod
    def of(cls, timing: Timing, *, repeats: int = 3) -> Schedule:
        """The schedule a suite's :class:`Timing` keywords name; ``repeats`` is the
        suite's own default (the cells that drift most take more runs)."""
        return cls(
            seconds=timing.get("seconds", 2.0),
            repeats=timing.get("repeats", repeats),
            warmup_s=timing.get("warmup_s", 0.3),
        )

    def figures(self) -> dict[str, float]:
        """The schedule as the suites' results record it."""
        return {"seconds_per_run": self.seconds, "repeats": self.repeats, "warmup_s": self.warmup_s}


async def interleaved(sides: Mapping[str, Timed], schedule: Schedule) -> Runs:
    """Every side warmed up once, then ``repeats`` rounds of each side in turn."""
    for timed in sides.values():
        await timed(schedule.warmup_s)
    runs: Runs = {name: [] for name in sides}
    for _ in range(schedule.repeats):
        for name, timed in sides.items():
            runs[name].append(await timed(schedule.seconds))
    return runs


def side_medians(runs: Mapping[str, Sequence[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each side's median figures across its runs."""
    return {side: median_of(r) for side, r in runs.items()}


class Latest:
    """A side that keeps its latest run's figures, for a ceiling measured after it."""

    def __init__(self, timed: Timed) -> None:
        self._timed = timed
        self.figures: dict[str, float] = {}

    async def __call__(self, seconds: float) -> dict[str, float]:
        self.figures = await self._timed(seconds)
        return self.figures


class _DelayingServer(Protocol):
    """What :func:`after` needs of the echo server (:mod:`streamwal_lab.bench.grpc_echo`)."""

    async def timed_after(
        self, delay_s: float, timed: Callable[[], Awaitable[dict[str, float]]], /
    ) -> dict[str, float]: ...


def after(echo: _DelayingServer, base: Latest, callers: int, delayed: Timed) -> Timed:
    """The ceiling: ``delayed`` (the echo server's delayed calls, with the cell's bytes)
    answered after ``base``'s mean latency in its latest run (``callers`` over its rate:
    a closed loop). A node whose WAL cost no CPU and took exactly the base's time could
    not beat it; below a bound, the bound cannot be met here whatever the node does."""

    async def run(seconds: float) -> dict[str, float]:
        wait_s = callers / max(base.figures.get("per_s", 0.0), 1.0)
        return await echo.timed_after(wait_s, lambda: delayed(seconds))

    return run
