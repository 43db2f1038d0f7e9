"""A streaming node whose TSO wall clock a fault scenario can move while it runs.

``python -m streamwal_lab.chaos.clock_node --clock-file PATH <streamwal serve options>``
runs ``streamwal serve`` with its in-process oracle on :class:`OffsetFileClock`: the
system clock plus the whole number of milliseconds written in ``PATH``, re-read when
the file changes. The scenario writes the file; the node never learns it is tested.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from streamwal.server.serve import add_arguments, run
from streamwal.tso import SystemClock

__all__ = ["OffsetFileClock", "clock_node_command", "main"]

_log = logging.getLogger(__name__)


class OffsetFileClock(SystemClock):
    """The system clock shifted by the milliseconds written in a file; no file, or a
    file that does not parse, keeps the last offset (a test clock never takes the node
    down)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._offset_ms = 0

    def wall_ms(self) -> int:
        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                self._offset_ms = int(self._path.read_text().strip() or 0)
                self._stamp = stamp
        except (OSError, ValueError):
            pass
        return time.time_ns() // 1_000_000 + self._offset_ms


def clock_node_command(clock_file: Path) -> list[str]:
    """The argv that starts such a node (``--config <file>`` still to be added)."""
    return [sys.executable, "-m", __name__, "--clock-file", str(clock_file)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__name__}",
        description="streamwal serve, with the TSO wall clock offset by a file's milliseconds",
    )
    parser.add_argument(
        "--clock-file", type=Path, required=True, help="milliseconds to add to the wall clock"
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(  # as the streamwal command line does before a command
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    _log.warning("test clock: the TSO wall clock follows the offset in %s", args.clock_file)
    return run(args, clock=OffsetFileClock(args.clock_file))
