"""``stack down`` stops only processes this stack started: the marker decides, not the pid.

The state file of a throwaway stack records pids of real processes. One was started
the way ``up`` starts a service; the others look like stack services (an ``etcd``
argv) but do not carry the recorded marker, as after a pid was reused or when the
pid belongs to another stack. ``down`` must stop the first and leave the others.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from streamwal_lab.stack import ServiceState, Stack, StackPaths
from streamwal_lab.stack.process import is_alive, pid_matches, start_detached

#: a process whose command line looks like the stack's etcd
_LOOKALIKE = [
    sys.executable, "-c", "import time; time.sleep(60)",
    "etcd", "--name", "streamwal-stack",
]  # fmt: skip


def _quiet(_: str) -> None:
    return None


def _lookalike(spawned: list[int], env: dict[str, str]) -> int:
    base = {k: v for k, v in os.environ.items() if k != "STREAMWAL_STACK_MARKER"}
    # its own session, like a service: a wrong ``killpg`` would really stop it
    proc = subprocess.Popen(
        _LOOKALIKE, env={**base, **env}, stdin=subprocess.DEVNULL, start_new_session=True
    )
    spawned.append(proc.pid)
    return proc.pid


def _wait_for_environ(pid: int, text: str, timeout: float = 5.0) -> None:
    """/proc/<pid>/environ is only final once the child has exec'd."""
    deadline = time.monotonic() + timeout
    while text.encode() not in Path(f"/proc/{pid}/environ").read_bytes():
        assert time.monotonic() < deadline, f"pid {pid} never showed {text!r}"
        time.sleep(0.02)


def _record(stack: Path, entries: dict[str, tuple[int, str]]) -> None:
    stack.mkdir(parents=True, exist_ok=True)
    state = {
        name: asdict(ServiceState(name, pid, {}, "", time.time(), marker))
        for name, (pid, marker) in entries.items()
    }
    (stack / "state.json").write_text(json.dumps(state))


async def test_down_stops_only_processes_carrying_the_recorded_marker(
    tmp_path: Path, spawned: list[int]
) -> None:
    paths = StackPaths(cache=tmp_path / "cache", stack=tmp_path / "stack")
    ours_marker = uuid.uuid4().hex
    ours = start_detached(
        _LOOKALIKE, cwd=tmp_path, log=tmp_path / "ours.log", env={}, marker=ours_marker
    )
    spawned.append(ours)
    no_marker = _lookalike(spawned, {"PROBE": "no-marker"})
    other_stack = _lookalike(spawned, {"STREAMWAL_STACK_MARKER": uuid.uuid4().hex})
    longer = _lookalike(spawned, {"STREAMWAL_STACK_MARKER": ours_marker + "-2"})
    unset_marker = _lookalike(spawned, {"STREAMWAL_STACK_MARKER": uuid.uuid4().hex})
    _wait_for_environ(ours, f"STREAMWAL_STACK_MARKER={ours_marker}")
    _wait_for_environ(no_marker, "PROBE=no-marker")
    for pid in (other_stack, longer, unset_marker):
        _wait_for_environ(pid, "STREAMWAL_STACK_MARKER=")

    _record(
        paths.stack,
        {
            "pulsar": (ours, ours_marker),
            # the pid was reused by a process that is not a stack service at all
            "etcd": (no_marker, uuid.uuid4().hex),
            # the pid belongs to a service of another stack
            "jaeger": (other_stack, uuid.uuid4().hex),
            # a marker that is only a prefix of the process's one is not its marker
            "otel-collector": (longer, ours_marker),
        },
    )
    stopped = await Stack(paths, progress=_quiet).down()

    assert stopped == ["pulsar"]
    assert not is_alive(ours)
    for pid in (no_marker, other_stack, longer):
        assert is_alive(pid), f"down stopped pid {pid}, which this stack did not start"
    assert json.loads((paths.stack / "state.json").read_text()) == {}

    # an entry without a marker (a state file of an older release) matches no process
    _record(paths.stack, {"etcd": (unset_marker, "")})
    assert not pid_matches(unset_marker, "")
    assert await Stack(paths, progress=_quiet).down() == []
    assert is_alive(unset_marker)


async def test_down_of_an_empty_stack_stops_nothing(tmp_path: Path, spawned: list[int]) -> None:
    lookalike = _lookalike(spawned, {})
    paths = StackPaths(cache=tmp_path / "cache", stack=tmp_path / "stack")
    assert await Stack(paths, progress=_quiet).down() == []
    assert is_alive(lookalike)
