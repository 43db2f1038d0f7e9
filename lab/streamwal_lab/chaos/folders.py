"""Folders of private servers under the cache, and the ones their owners left behind.

A private broker keeps its data (about 80 MiB) in the user's cache, beside the shared
stack, and removes it when it closes. A run killed outright never closes it: the
broker dies with its parent, but the folder stays. So each folder carries a lock its
owner holds for as long as it runs (an ``flock``, which the kernel drops with the
process), and whoever starts the next private broker removes the folders nobody
holds. A folder without that lock is never removed: it may be a stack of the same
name, or a broker of a version that took no lock, still running.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path

__all__ = ["LOCK_NAME", "claim", "sweep_abandoned"]

LOCK_NAME = "owner.lock"
#: a lock file younger than this may belong to an owner that has not locked it yet
_LOCK_GRACE_S = 60.0


def claim(folder: Path) -> int:
    """Create ``folder`` and hold its lock; the descriptor, to :func:`os.close` after
    the folder is removed. Not inherited by children (a broker that outlived us must
    not keep its folder held)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _age_s(path: Path) -> float:
    return time.time() - path.stat().st_mtime


def _abandoned(folder: Path) -> bool:
    """Nobody holds its lock (and it is old enough that nobody is about to)."""
    lock = folder / LOCK_NAME
    try:
        if _age_s(lock) < _LOCK_GRACE_S:
            return False
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except OSError:  # no lock file, or removed meanwhile
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # the lock goes with it; a new owner would make a new folder
    return True


def sweep_abandoned(parent: Path, pattern: str) -> list[Path]:
    """Remove the folders in ``parent`` matching ``pattern`` that no living process
    holds; the ones removed (blocking: run it off the event loop)."""
    removed = []
    for folder in sorted(parent.glob(pattern)):
        with contextlib.suppress(OSError):
            if folder.is_dir() and _abandoned(folder):
                shutil.rmtree(folder, ignore_errors=True)
                if not folder.exists():
                    removed.append(folder)
    return removed
