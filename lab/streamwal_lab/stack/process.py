"""Detached server processes: start with a recorded pid, recognise them later, stop them.

A process is only ever stopped when its environment still carries the marker the
stack gave it, so ``down`` never kills an unrelated process that reused a pid.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = [
    "child_pids",
    "die_with_parent",
    "is_alive",
    "pid_matches",
    "port_in_use",
    "start_detached",
    "stop_process",
]


def die_with_parent() -> list[str]:
    """An argv prefix that has a child killed when the process that started it dies.

    For the children of a test run or a bench (nodes, brokers, etcd members): a run
    that is killed outright runs no ``finally`` and no session hook, and its children
    would go on writing to the shared stack. ``setpriv --pdeathsig`` (util-linux)
    where it exists; otherwise nothing. (Not a ``preexec_fn``: forking a process that
    runs gRPC and Pulsar client threads and running Python in the child can hang it.)
    The signal follows the thread that forked, so start children from a thread that
    lives as long as they should: the event loop's, not a pool's. A parent killed
    before ``setpriv`` has run the command leaves the child without it.
    """
    return list(_pdeathsig_prefix())


def child_pids(pid: int) -> list[int]:
    """The live children of process ``pid`` (of every thread), from ``/proc``."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids.extend(int(k) for k in (task / "children").read_text().split())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return kids


@functools.cache
def _pdeathsig_prefix() -> tuple[str, ...]:
    """Tried once: a ``setpriv`` without ``--pdeathsig`` (util-linux before 2.33, a
    busybox applet) would fail every start."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is None:
        return ()
    prefix = (setpriv, "--pdeathsig", "KILL", "--")
    try:
        tried = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return prefix if tried.returncode == 0 else ()


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still answers kill(0); look at its state
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def pid_matches(pid: int, marker: str) -> bool:
    """True when ``pid`` is alive and its environment carries exactly ``marker``.

    The whole ``NAME=value`` entry is compared: a marker that is only a prefix of the
    process's one, or an empty marker (a state entry written without one), is not a match.
    """
    if not marker or not is_alive(pid):
        return False
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"STREAMWAL_STACK_MARKER={marker}".encode() in environ.split(b"\0")


#: a service's output file is appended to across starts; past this it is rotated
LOG_ROTATE_BYTES = 8 * 1024 * 1024


def rotate_log(log: Path, limit: int = LOG_ROTATE_BYTES) -> None:
    """Keep one previous output file, so a stack restarted for weeks keeps its disk."""
    try:
        if log.stat().st_size > limit:
            log.replace(log.with_name(log.name + ".1"))
    except FileNotFoundError:
        pass


def start_detached(
    argv: list[str], *, cwd: Path, log: Path, env: dict[str, str], marker: str
) -> int:
    """Start ``argv`` in its own session so it outlives the CLI; returns the pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    rotate_log(log)
    full_env = {**os.environ, **env, "STREAMWAL_STACK_MARKER": marker}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
    return proc.pid


def stop_process(
    pid: int, marker: str, timeout: float = 20.0, *, killed_within: float = 10.0
) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; returns whether it was ours and is gone.

    After SIGKILL it still waits, up to ``killed_within``, for the process to be gone:
    one that did not stop on SIGTERM (a deadlocked broker) takes a while to exit after
    SIGKILL too, and holds its ports until then, so a restart right away found them
    taken. :class:`TimeoutError` if it outlives that as well."""
    if not pid_matches(pid, marker):
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, killed_within)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not is_alive(pid):
                return True
            time.sleep(0.1)
    raise TimeoutError(f"process {pid} still runs {killed_within:g} s after SIGKILL")
