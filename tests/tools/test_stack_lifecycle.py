"""``up`` returns only once a service answers and says so; ``status`` and ``down`` follow it.

A throwaway stack (its own folder, a free port) runs one small real server that
starts listening only after a delay, so the waiting is observable; the shared stack
is not touched.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal_lab.stack import Service, Stack, StackPaths
from streamwal_lab.stack.process import is_alive, port_in_use
from streamwal_lab.stack.service import Progress
from streamwal_lab.stack.stack import StackError
from tests.node.processes import free_port

#: listens on argv[2] after argv[1] seconds, or exits with status 3 when the port is 0
_SERVER = """
import socket, sys, time
delay, port = float(sys.argv[1]), int(sys.argv[2])
time.sleep(delay)
if port == 0:
    print("no port to listen on", flush=True)
    sys.exit(3)
sock = socket.socket()
sock.bind(("127.0.0.1", port))
sock.listen()
time.sleep(60)
"""

_DELAY = 1.5


class SlowServer(Service):
    """A service whose server answers only ``_DELAY`` seconds after it was started."""

    name = "slow-server"
    start_timeout = 30.0

    def __init__(self, paths: StackPaths, port: int) -> None:
        super().__init__(paths)
        self.port = port

    @property
    def ports(self) -> dict[str, int]:
        return {"main": self.port}

    def prerequisites(self) -> list[str]:
        return []

    def install(self, progress: Progress) -> None:
        progress(f"{self.name}: nothing to fetch")

    def command(self) -> list[str]:
        return [sys.executable, "-c", _SERVER, str(_DELAY), str(self.port)]

    async def probe(self) -> bool:
        return self.port != 0 and await asyncio.to_thread(port_in_use, self.port)


def _stack(tmp_path: Path, service_port: int) -> tuple[Stack, list[str]]:
    paths = StackPaths(cache=tmp_path / "cache", stack=tmp_path / "stack")
    messages: list[str] = []
    stack = Stack(paths, progress=messages.append)
    stack.services = {**stack.services, "slow-server": SlowServer(paths, service_port)}
    return stack, messages


async def test_up_waits_until_the_server_answers_then_status_and_down_follow(
    tmp_path: Path,
) -> None:
    port = free_port()
    stack, messages = _stack(tmp_path, port)
    started = time.monotonic()
    try:
        await stack.up(["slow-server"])
        elapsed = time.monotonic() - started
        assert port_in_use(port), "up returned before the server listened"
        assert elapsed >= _DELAY

        row = next(r for r in stack.status() if r["service"] == "slow-server")
        pid = row["pid"]
        assert row["running"] is True and row["ports"] == {"main": port}
        assert isinstance(pid, int) and is_alive(pid)
        assert f"slow-server: started (pid {pid}), waiting until it answers" in messages
        assert any(m.startswith("slow-server: ready in ") for m in messages), messages

        messages.clear()
        await stack.up(["slow-server"])  # a second up reuses what runs
        assert messages == [f"slow-server: already running (pid {pid})"]
        assert is_alive(pid)
    except BaseException:
        # stop what may run, then let the failure above be the one reported
        await stack.down(["slow-server"])
        raise
    stopped = await stack.down(["slow-server"])
    assert stopped == ["slow-server"]
    assert not is_alive(pid)
    assert not port_in_use(port)


async def test_up_reports_a_server_that_exits_during_start_up(tmp_path: Path) -> None:
    stack, _ = _stack(tmp_path, 0)
    with pytest.raises(StackError, match="slow-server exited during start-up") as caught:
        await stack.up(["slow-server"])
    assert "no port to listen on" in str(caught.value)  # the tail of its log
    assert (tmp_path / "stack" / "slow-server" / "slow-server.log").is_file()


async def test_two_ups_at_once_start_the_server_once(tmp_path: Path) -> None:
    """A second ``up`` waits for the first, then reuses what it started: without the
    lock both start the server, the loser dies on the taken port, and its entry
    replaces the winner's in the state file."""
    port = free_port()
    first, first_says = _stack(tmp_path, port)
    second, second_says = _stack(tmp_path, port)
    try:
        await asyncio.gather(first.up(["slow-server"]), second.up(["slow-server"]))
        said = first_says + second_says
        assert sum("started (pid" in m for m in said) == 1, said
        assert any("waiting for another `stack up`" in m for m in said), said
        assert any("already running" in m for m in said), said
        entry = first.running("slow-server")
        assert entry is not None and is_alive(entry.pid)
    finally:
        await first.down()


class FlakyStart(SlowServer):
    """Answers, but its first ``bad_starts`` starts show a problem in their output."""

    start_attempts = 3

    def __init__(self, paths: StackPaths, port: int, bad_starts: int) -> None:
        super().__init__(paths, port)
        self.bad_starts = bad_starts
        self.outputs: list[str] = []

    def command(self) -> list[str]:
        start = len(self.outputs) + 1
        flaw = "print('bookie lost', flush=True)\n" if start <= self.bad_starts else ""
        script = f"print('start {start}', flush=True)\n{flaw}" + _SERVER
        return [sys.executable, "-c", script, "0.2", str(self.port)]

    async def start_problem(self, output: Callable[[], str]) -> str | None:
        await asyncio.sleep(0.3)  # the flaw line is printed before the port opens anyway
        text = output()
        self.outputs.append(text)
        return "it lost its bookie" if "bookie lost" in text else None


def _flaky_stack(tmp_path: Path, bad_starts: int) -> tuple[Stack, FlakyStart, list[str]]:
    paths = StackPaths(cache=tmp_path / "cache", stack=tmp_path / "stack")
    messages: list[str] = []
    stack = Stack(paths, progress=messages.append)
    service = FlakyStart(paths, free_port(), bad_starts)
    stack.services = {**stack.services, "slow-server": service}
    return stack, service, messages


async def test_up_starts_again_a_server_whose_start_shows_a_problem(tmp_path: Path) -> None:
    """Each start is judged on its own output only: the second start's output does
    not hold the first one's problem line, though both go to the same file."""
    stack, service, messages = _flaky_stack(tmp_path, bad_starts=1)
    try:
        await stack.up(["slow-server"])
        assert [("start 1" in o, "start 2" in o) for o in service.outputs] == [
            (True, False),
            (False, True),
        ]
        assert (
            "slow-server: it lost its bookie; stopping it and starting it again (start 2 of 3)"
            in messages
        )
        entry = stack.running("slow-server")
        assert entry is not None and is_alive(entry.pid)
        assert sum("started (pid" in m for m in messages) == 2, messages
        log = tmp_path / "stack" / "slow-server" / "slow-server.log"
        assert "start 1" in log.read_text()  # the first start's output is kept
    finally:
        await stack.down()


async def test_up_fails_when_every_start_shows_the_problem(tmp_path: Path) -> None:
    stack, service, _ = _flaky_stack(tmp_path, bad_starts=3)
    with pytest.raises(StackError, match="it lost its bookie; it was there after 3 starts"):
        await stack.up(["slow-server"])
    assert len(service.outputs) == 3
    assert stack.running("slow-server") is None  # stopped and forgotten
    assert not port_in_use(service.port)


class Outdated(SlowServer):
    """Answers, and says it must restart while ``outdated`` (settings changed since)."""

    outdated = False

    def restart_reason(self) -> str | None:
        return "started with other settings" if self.outdated else None


async def test_up_restarts_a_server_started_with_settings_changed_since(tmp_path: Path) -> None:
    """The stack's Jaeger started before ``STREAMWAL_JAEGER_UI_ASSETS`` was set serves a
    placeholder page: ``up`` restarts such a server instead of calling it running."""
    paths = StackPaths(cache=tmp_path / "cache", stack=tmp_path / "stack")
    messages: list[str] = []
    stack = Stack(paths, progress=messages.append)
    service = Outdated(paths, free_port())
    stack.services = {**stack.services, "slow-server": service}
    try:
        await stack.up(["slow-server"])
        first = stack.running("slow-server")
        assert first is not None
        service.outdated = True
        messages.clear()
        await stack.up(["slow-server"])
        second = stack.running("slow-server")
        assert second is not None and second.pid != first.pid
        assert not is_alive(first.pid) and is_alive(second.pid)
        assert messages[0] == "slow-server: running but started with other settings; restarting"
        service.outdated = False
        messages.clear()
        await stack.up(["slow-server"])
        assert messages == [f"slow-server: already running (pid {second.pid})"]
    finally:
        await stack.down()
