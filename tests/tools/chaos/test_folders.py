"""Private brokers' folders: a living owner's is kept, a dead owner's is removed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from streamwal_lab.chaos.folders import LOCK_NAME, claim, sweep_abandoned

_HOUR_AGO = time.time() - 2 * 3600


def _age(path: Path) -> None:
    os.utime(path, (_HOUR_AGO, _HOUR_AGO))


def _claimed_by_a_process_that_exited(folder: Path) -> None:
    code = (
        "from pathlib import Path; from streamwal_lab.chaos.folders import claim; "
        f"claim(Path({str(folder)!r}))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_held_folder_is_kept_however_old(tmp_path: Path) -> None:
    folder = tmp_path / "chaos-held"
    fd = claim(folder)
    try:
        _age(folder / LOCK_NAME)
        assert sweep_abandoned(tmp_path, "chaos-*") == []
        assert folder.is_dir()
    finally:
        os.close(fd)


def test_the_folder_of_an_owner_that_died_is_removed(tmp_path: Path) -> None:
    dead = tmp_path / "chaos-dead"
    _claimed_by_a_process_that_exited(dead)
    (dead / "pulsar").mkdir()
    (dead / "pulsar" / "data").write_bytes(b"x" * 1024)
    _age(dead / LOCK_NAME)
    other = tmp_path / "default"  # not a private broker's
    other.mkdir()
    assert sweep_abandoned(tmp_path, "chaos-*") == [dead]
    assert not dead.exists()
    assert other.is_dir()


def test_a_fresh_lock_is_left_to_the_owner_about_to_take_it(tmp_path: Path) -> None:
    young = tmp_path / "chaos-young"
    _claimed_by_a_process_that_exited(young)
    assert sweep_abandoned(tmp_path, "chaos-*") == []
    assert young.is_dir()


def test_a_folder_without_a_lock_is_never_removed(tmp_path: Path) -> None:
    """It may be a stack of that name, or a broker that took no lock, still running."""
    unlocked = tmp_path / "chaos-unlocked"
    unlocked.mkdir()
    _age(unlocked)
    assert sweep_abandoned(tmp_path, "chaos-*") == []
    assert unlocked.is_dir()
