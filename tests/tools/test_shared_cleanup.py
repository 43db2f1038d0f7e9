"""Runs sharing a stack tidy up together: only the last one out deletes, against the
first one's baseline; a run that died is dropped by its pid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from streamwal_lab.stack.topics import SharedCleanup


class _Run(SharedCleanup):
    """A registration under another pid, as a second process would make it."""

    def __init__(self, folder: Path, pid: int) -> None:
        super().__init__(folder)
        self._me = folder / f"run-{pid}"


def test_the_last_run_out_deletes_against_the_first_runs_baseline(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        first = _Run(tmp_path, other.pid)
        second = SharedCleanup(tmp_path)
        first.enter({"a"})
        second.enter({"a", "b"})  # b is the first run's topic: not a baseline
        assert second.leave() is None  # the first run is live: nothing to delete yet
        assert first.leave() == {"a"}
        assert not (tmp_path / "baseline.json").exists()
    finally:
        other.kill()
        other.wait()


def test_a_dead_run_is_dropped_and_a_lone_run_keeps_its_own_baseline(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _Run(tmp_path, dead.pid).enter({"old"})  # died without leaving
    run = SharedCleanup(tmp_path)
    run.enter({"old", "new"})
    assert not (tmp_path / f"run-{dead.pid}").exists()
    assert run.leave() == {"old", "new"}
    assert not list(tmp_path.glob("run-*"))


def test_leaving_without_entering_deletes_nothing(tmp_path: Path) -> None:
    assert SharedCleanup(tmp_path).leave() is None
