"""A child started behind :func:`die_with_parent` does not outlive a parent killed outright.

Such a parent runs no ``finally`` and no session hook; before this, the nodes a
killed test run had started went on writing to the shared stack.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from streamwal_lab.stack.process import die_with_parent, is_alive

_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([*{prefix!r}, "sleep", "1000"])
print(child.pid, flush=True)
time.sleep(1000)
"""


def _child_of_a_killed_parent(prefix: list[str]) -> int:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT.format(prefix=prefix)], stdout=subprocess.PIPE
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        # setpriv asks for the signal and then runs sleep: a parent killed before
        # that would leave the child without it
        deadline = time.monotonic() + 10
        while _name(child) != "sleep":
            assert time.monotonic() < deadline, _name(child)
            time.sleep(0.01)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    return child


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except FileNotFoundError:
        return ""


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not die_with_parent(), reason="no setpriv here: children may outlive us")
def test_a_child_dies_with_its_killed_parent() -> None:
    child = _child_of_a_killed_parent(die_with_parent())
    assert _gone_within(child, 5.0)


def test_without_it_the_child_lives_on() -> None:
    """The control: what the prefix prevents does happen without it."""
    child = _child_of_a_killed_parent([])
    try:
        assert not _gone_within(child, 0.5)
    finally:
        os.kill(child, signal.SIGKILL)
