"""CPU time of another process over a timed run, per operation it served.

Throughput ratios say how fast a node goes on two shared cores, not what each append
costs it: a node that keeps up by burning more CPU leaves less for the broker beside
it. So the node-load suite reads the node's CPU time (and the gRPC echo server's, the
floor) around each timed run and divides by the operations the run completed.

The figure is the process's ``utime + stime`` from ``/proc/<pid>/stat``: every
thread's, the Pulsar client's C++ threads and gRPC's included, and threads that ended
during the run too (per-thread counters would lose those), plus that of its live
child processes (a node's native front serves its calls). Its unit is the clock tick
(10 ms at the usual 100 Hz), so a run should use a few hundred ticks at least.
Linux only, as the local stack is.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from streamwal_lab.stack.process import child_pids

__all__ = ["CPU_KEY", "cpu_seconds", "metered", "parse_cpu_seconds", "per_op_us"]

#: the key a metered run's figures get: CPU microseconds per operation
CPU_KEY = "cpu_us_per_op"


def parse_cpu_seconds(stat: str, ticks_per_s: float) -> float:
    """``utime + stime`` in seconds from the text of ``/proc/<pid>/stat``.

    The second field (the command name, in parentheses) may hold spaces and
    parentheses itself, so the fields are counted from after its last ``)``: ``utime``
    and ``stime`` are the 14th and 15th fields of the line, the 12th and 13th after it.
    """
    _, closing, rest = stat.rpartition(")")
    if not closing:
        raise ValueError(f"not a /proc/<pid>/stat line: {stat[:80]!r}")
    fields = rest.split()
    # rest starts at field 3 (state): field n is fields[n - 3]
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / ticks_per_s


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` and its live children have used so far (every
    thread), in seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = parse_cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), ticks)
    for child in child_pids(pid):
        try:
            total += cpu_seconds(child)
        except (FileNotFoundError, ProcessLookupError):  # ended meanwhile
            pass
    return total


def per_op_us(cpu_s: float, ops: float) -> float:
    """Microseconds of CPU per operation; NaN without operations."""
    if ops <= 0:
        return float("nan")
    return round(cpu_s / ops * 1e6, 1)


def metered(
    pid: int, timed: Callable[[float], Awaitable[dict[str, float]]], ops_key: str = "ops"
) -> Callable[[float], Awaitable[dict[str, float]]]:
    """``timed`` (a timed run of ``seconds``, returning its figures) with process
    ``pid``'s CPU per operation (:data:`CPU_KEY`) and its CPU seconds (``cpu_s``) added
    to the figures; the operations are the figures' ``ops_key``."""

    async def run(seconds: float) -> dict[str, float]:
        before = cpu_seconds(pid)
        figures = await timed(seconds)
        used = cpu_seconds(pid) - before
        ops = figures.get(ops_key, 0.0)
        return {**figures, "cpu_s": round(used, 3), CPU_KEY: per_op_us(used, ops)}

    return run
