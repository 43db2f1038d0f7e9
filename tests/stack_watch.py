"""A pytest plugin that heals the shared Pulsar when it stops serving, and runs again
the test that met it.

Why it exists: in one CI run the standalone broker's in-process bookie stopped
answering (every add and read timed out, and the broker stopped taking connections)
and stayed so for 28 minutes, until a later test happened to restart Pulsar; fifteen
tests in between failed against a broker that no longer served anything. The suite
cannot fix BookKeeper, but it can notice. After a test that used the shared stack fails,
the plugin asks the broker's own health check (``/admin/v2/brokers/health``: a write
and a read of its heartbeat topic). If that does not answer ``ok`` in time, it saves the
broker's thread dump beside its log (for whoever looks into the hang), restarts Pulsar,
and runs the test once more; the terminal summary names each such test, what the check
said and the first run's failure. A test that fails on a healthy broker is reported as
it failed, once.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

#: seconds the broker's health check may take; it writes and reads a message
HEALTH_TIMEOUT_S = 20.0
#: seconds a restart of Pulsar may take (the broker replays its bookie's journal)
RESTART_TIMEOUT_S = 300.0

_RESTART = (
    "import asyncio; from streamwal_lab.stack import Stack; asyncio.run(Stack().restart('pulsar'))"
)


def broker_unhealthy(admin_url: str, timeout: float = HEALTH_TIMEOUT_S) -> str | None:
    """Why the broker at ``admin_url`` does not serve, or None when its health check
    answers ``ok`` within ``timeout`` seconds."""
    url = admin_url.rstrip("/") + "/admin/v2/brokers/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            body = answer.read(200).decode(errors="replace").strip()
    except urllib.error.HTTPError as exc:
        return f"health check answered HTTP {exc.code}"
    except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, timed out
        return f"health check failed: {type(exc).__name__}: {exc}"
    return None if body == "ok" else f"health check answered {body!r}"


@dataclass
class Healed:
    """A test that failed on a broker found broken, and was run again after a restart."""

    nodeid: str
    why: str
    what_was_done: str
    first_failure: str
    passed_again: bool


class HealFailed(Exception):
    """The broker could not be brought back: no test is run again after this."""


class StackWatch:
    """The plugin: ``probe()`` says why the shared broker does not serve (None: it
    does), ``heal(why)`` brings it back and says what it did, or raises
    :class:`HealFailed`. Only tests that use the fixture ``fixture`` are watched.

    The guard (:mod:`tests.guard`) times each test; it is paused while the broker is
    probed and healed, and the second run gets a timeout of its own."""

    def __init__(
        self,
        probe: Callable[[], str | None],
        heal: Callable[[str], str],
        fixture: str = "stack",
    ) -> None:
        self.probe = probe
        self.heal = heal
        self.fixture = fixture
        self.healed: list[Healed] = []
        self.gave_up: str | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        if self.fixture not in getattr(item, "fixturenames", ()):
            return None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        failed = [r for r in reports if r.failed]
        if failed and self.gave_up is None:
            guard = item.config.pluginmanager.get_plugin("streamwal-guard")
            if guard is not None:
                guard.pause(item)
            try:
                healed = self._heal_if_broken()
            finally:
                if guard is not None:
                    guard.resume(item)
            if healed is not None:
                why, done = healed
                _forget_failed_fixtures(item)
                first = "; ".join(f"{r.when}: {_crash(r)}" for r in failed)
                reports = runtestprotocol(item, nextitem=nextitem, log=False)
                passed = not any(r.failed for r in reports)
                self.healed.append(Healed(item.nodeid, why, done, first, passed))
                for r in reports:
                    r.sections.append(("stack-watch", f"run again after: {why}; {done}"))
        for r in reports:
            ihook.pytest_runtest_logreport(report=r)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _heal_if_broken(self) -> tuple[str, str] | None:
        """(why, what was done) when the broker was broken and is back; None when it
        served all along, or could not be brought back (then never again this run)."""
        try:
            why = self.probe()
        except Exception as exc:  # the check itself broke: count it as a broken broker
            why = f"health check raised {type(exc).__name__}: {exc}"
        if why is None:
            return None
        try:
            done = self.heal(why)
        except Exception as exc:
            self.gave_up = f"{why}; {exc}"
            print(f"\nstack-watch: giving up: {self.gave_up}", file=sys.stderr)
            return None
        return why, done

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.gave_up is not None:
            terminalreporter.section("stack-watch: the shared broker could not be healed")
            terminalreporter.write_line(self.gave_up)
        if not self.healed:
            return
        terminalreporter.section("stack-watch: the shared broker stopped serving")
        for h in self.healed:
            verdict = "passed when run again" if h.passed_again else "failed again"
            terminalreporter.write_line(f"{h.nodeid}: {h.why}; {h.what_was_done}; {verdict}")
            terminalreporter.write_line(f"  first run: {h.first_failure}")


def _crash(report: pytest.TestReport) -> str:
    """The failure's exception line (``TimeoutError: ...``), else its last line."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0]
    lines = report.longreprtext.strip().splitlines()
    return lines[-1] if lines else "?"


def _forget_failed_fixtures(item: pytest.Item) -> None:
    """A fixture of a wider scope whose set-up failed keeps its error for every later
    test; the run after the restart sets it up again."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    for defs in info.name2fixturedefs.values():
        for fixturedef in defs:
            cached = fixturedef.cached_result
            if cached is not None and cached[2] is not None:
                fixturedef.cached_result = None


def _dump_threads(pid: int, folder: Path) -> str:
    """The JVM's thread dump saved in ``folder``; what was saved, or why not."""
    target = folder / f"threads-{time.strftime('%Y%m%dT%H%M%S')}.txt"
    try:
        dump = subprocess.run(
            ["jcmd", str(pid), "Thread.print"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no thread dump ({type(exc).__name__})"
    target.write_text(dump.stdout + dump.stderr)
    return f"thread dump in {target}"


def _shared_broker() -> tuple[Callable[[], str | None], Callable[[str], str]]:
    from streamwal_lab.stack import Stack

    stack = Stack()

    def probe() -> str | None:
        # a test that used the stack had it started by the session's fixture
        if stack.running("pulsar") is None:
            return "Pulsar is not running"
        return broker_unhealthy(stack.info().pulsar_admin_url)

    def heal(why: str) -> str:
        running = stack.running("pulsar")
        dumped = _dump_threads(running.pid, Path(running.log).parent) if running else "no pid"
        print(
            f"\nstack-watch: Pulsar does not serve ({why}); {dumped}; restarting it",
            file=sys.stderr,
        )
        began = time.monotonic()
        try:
            restart = subprocess.run(
                [sys.executable, "-c", _RESTART],
                capture_output=True,
                text=True,
                timeout=RESTART_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HealFailed(f"{dumped}; restart failed: {type(exc).__name__}: {exc}") from exc
        took = time.monotonic() - began
        if restart.returncode != 0:
            tail = (restart.stderr or restart.stdout).strip().splitlines()[-3:]
            raise HealFailed(f"{dumped}; restart failed after {took:.0f}s: {' / '.join(tail)}")
        still = probe()
        if still is not None:
            raise HealFailed(f"{dumped}; restarted in {took:.0f}s, and still: {still}")
        return f"{dumped}; Pulsar restarted in {took:.0f}s"

    return probe, heal


def pytest_configure(config: pytest.Config) -> None:
    probe, heal = _shared_broker()
    config.pluginmanager.register(StackWatch(probe, heal), "streamwal-stack-watch")
