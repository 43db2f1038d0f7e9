"""``stop_process``: a process that ignores SIGTERM is killed, and waited for until it
is gone, so its ports are free for the restart that follows."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from streamwal_lab.stack import process
from streamwal_lab.stack.process import is_alive, start_detached, stop_process

#: a process that will not stop on SIGTERM, like a deadlocked broker
_DEAF = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)",
]


def _deaf(tmp_path: Path) -> tuple[int, str]:
    marker = uuid.uuid4().hex
    log = tmp_path / "deaf.log"
    pid = start_detached(_DEAF, cwd=tmp_path, log=log, env={}, marker=marker)
    deadline = time.monotonic() + 10
    while b"ready" not in log.read_bytes():  # its SIGTERM handler is set
        assert time.monotonic() < deadline, "the process never got ready"
        time.sleep(0.02)
    return pid, marker


def _slow_to_die(monkeypatch: pytest.MonkeyPatch, polls: int) -> list[int]:
    """After SIGKILL, the process looks alive for ``polls`` more looks (a JVM with a
    large heap takes a while to exit); returns the count of looks after SIGKILL."""
    looks = [0]
    killed = [False]
    real_killpg, real_alive = os.killpg, process.is_alive

    def killpg(pid: int, sig: int) -> None:
        if sig == signal.SIGKILL:
            killed[0] = True
        real_killpg(pid, sig)

    def alive(pid: int) -> bool:
        if not killed[0]:
            return real_alive(pid)
        looks[0] += 1
        return looks[0] <= polls or real_alive(pid)

    monkeypatch.setattr(os, "killpg", killpg)
    monkeypatch.setattr(process, "is_alive", alive)
    return looks


def test_a_process_deaf_to_sigterm_is_waited_for_after_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid, marker = _deaf(tmp_path)
    looks = _slow_to_die(monkeypatch, polls=3)
    assert stop_process(pid, marker, timeout=0.3) is True
    assert looks[0] >= 4  # it looked until the process was gone, not once
    assert not is_alive(pid)


def test_a_process_that_outlives_sigkill_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid, marker = _deaf(tmp_path)
    _slow_to_die(monkeypatch, polls=1_000_000)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="after SIGKILL"):
        stop_process(pid, marker, timeout=0.2, killed_within=0.3)
    assert time.monotonic() - started < 5
    monkeypatch.undo()
    assert not is_alive(pid)  # it was killed all the same


def test_a_process_that_stops_on_sigterm_is_not_killed(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    pid = start_detached(argv, cwd=tmp_path, log=tmp_path / "p.log", env={}, marker=marker)
    deadline = time.monotonic() + 10
    while not process.pid_matches(pid, marker):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    started = time.monotonic()
    assert stop_process(pid, marker) is True
    assert time.monotonic() - started < 5 and not is_alive(pid)
