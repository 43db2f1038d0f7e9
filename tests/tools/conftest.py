"""Fixtures of the tools tests."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def spawned() -> Iterator[list[int]]:
    """Pids a test started; each is killed and reaped at the end, whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
