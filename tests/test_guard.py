"""The suite's resource guard (:mod:`tests.guard`) catches what it is there for.

Each case runs a small pytest session in a subprocess (``pytester``): the guard
kills and exits processes and installs a SIGALRM handler, which must not touch the
session running these tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester whose sessions load the guard, with the guard's variables unset."""
    monkeypatch.setenv("PYTHONPATH", str(_ROOT))
    for name in list(os.environ):
        if name.startswith("STREAMWAL_GUARD_"):
            monkeypatch.delenv(name)
    pytester.makeini(
        """
        [pytest]
        asyncio_mode = auto
        asyncio_default_fixture_loop_scope = session
        asyncio_default_test_loop_scope = session
        timeout = 60
        guard_timeout_grace = 5
        """
    )
    return pytester


def _run(pytester: pytest.Pytester, *args: str, timeout: float = 90) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "tests.guard", "-p", "no:cacheprovider", *args, timeout=timeout
    )


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@dataclass(frozen=True)
class _Child:
    """The ``sleep`` an inner test starts with ``children.start_a_child()``: the process
    the guard must not leave behind. Its pid is in ``pid_file`` once it has started."""

    pid_file: Path

    def started(self) -> bool:
        return self.pid_file.exists() and bool(self.pid_file.read_text())

    def gone(self, within: float = 0.0) -> bool:
        """Whether it has ended (a zombie has), given up to ``within`` seconds to end."""
        pid = int(self.pid_file.read_text())
        deadline = time.monotonic() + within
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return not _alive(pid)


@pytest.fixture
def child(inner: pytest.Pytester) -> _Child:
    """Writes the module ``children`` that the inner session's tests import."""
    pid_file = inner.path / "child.pid"
    inner.makepyfile(
        children=f"""
        import subprocess

        def start_a_child():
            child = subprocess.Popen(["sleep", "1000"])
            open({str(pid_file)!r}, "w").write(str(child.pid))
        """
    )
    return _Child(pid_file)


def test_a_test_that_keeps_growing_fails_and_its_allocation_site_is_named(
    inner: pytest.Pytester,
) -> None:
    # auto mode: tracing starts once the test has grown by a quarter of the bound
    inner.makepyfile(
        test_leak="""
        import time

        KEPT = []

        def remember_forever():
            for _ in range(80):
                KEPT.append(b"x" * (1024 * 1024))  # the leak
                time.sleep(0.02)

        def test_leaks():
            remember_forever()

        def test_after_it():
            pass
        """
    )
    result = _run(inner, "-o", "guard_rss_test_mb=40")
    result.assert_outcomes(passed=2, errors=1)
    out = result.stdout.str()
    assert "ERROR at teardown of test_leaks" in out
    result.stdout.fnmatch_lines(
        [
            "*the test grew the pytest process by * MB*above the bound of 40 MB*",
            "*top allocation sites still alive at the end of the test*",
            "*MB in * blocks, allocated at",
            '*/test_leak.py:7: KEPT.append(b"x" * (1024 * 1024))  # the leak',
            "*/test_leak.py:11: remember_forever()",
        ]
    )


def test_with_tracemalloc_always_a_leak_in_one_step_is_traced_too(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMWAL_GUARD_TRACEMALLOC", "always")
    monkeypatch.setenv("STREAMWAL_GUARD_TRACEMALLOC_FRAMES", "1")
    monkeypatch.setenv("STREAMWAL_GUARD_RSS_TEST_MB", "30")
    inner.makepyfile(
        test_once="""
        KEPT = []

        def test_leaks_at_once():
            KEPT.append(b"y" * (64 * 1024 * 1024))
        """
    )
    result = _run(inner)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*grew the pytest process by*", '*/test_once.py:4: KEPT.append(b"y" * (64 * 1024 * 1024))']
    )


def test_a_session_above_its_bound_is_stopped_during_the_test(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_runaway="""
        import time

        KEPT = []

        def test_runs_away():
            for _ in range(2000):  # 2 GB, if nothing stopped it
                KEPT.append(b"z" * (1024 * 1024))
                time.sleep(0.005)

        def test_never_runs():
            pass
        """
    )
    started = time.monotonic()
    result = _run(inner, "-o", "guard_rss_session_mb=200", "-o", "guard_rss_test_mb=0")
    assert time.monotonic() - started < 60
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*streamwal-guard: RSS * MB is above the session bound of 200 MB*",
            "*the run was stopped: *",
        ]
    )
    assert "test_never_runs PASSED" not in result.stdout.str()


def test_a_timeout_fires_while_the_event_loop_is_blocked(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_blocked="""
        import asyncio
        import time

        import pytest

        @pytest.mark.timeout(1)
        async def test_blocks_the_loop():
            time.sleep(120)  # no await: the loop never runs again

        async def test_the_loop_still_works_after_it():
            await asyncio.sleep(0.01)
        """
    )
    started = time.monotonic()
    result = _run(inner, "-v")
    assert time.monotonic() - started < 60
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*streamwal-guard: Timeout: the test ran over its 1 s*",
            "*the event loop was busy or blocked*",
            "*=== threads ===*",
            "*test_blocked.py*in test_blocks_the_loop*",
            "*=== asyncio tasks ===*",
        ]
    )


def test_a_timeout_fires_while_other_tasks_keep_the_loop_busy(inner: pytest.Pytester) -> None:
    # pytest-timeout's SIGALRM lands in one of the busy tasks' callbacks, where
    # asyncio.Handle._run logs it and carries on: alone, this test passed after 12 s
    inner.makepyfile(
        test_busy="""
        import asyncio
        import time

        import pytest

        @pytest.mark.timeout(1)
        async def test_busy_loop():
            async def spin():
                while True:
                    sum(range(20000))
                    await asyncio.sleep(0)

            tasks = [asyncio.create_task(spin()) for _ in range(4)]
            try:
                started = time.monotonic()
                while time.monotonic() - started < 120:
                    await asyncio.sleep(0.1)
            finally:
                for task in tasks:
                    task.cancel()
        """
    )
    started = time.monotonic()
    result = _run(inner)
    assert time.monotonic() - started < 60  # the test alone runs 120 s
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CancelledError: streamwal-guard: Timeout*"])


def test_a_timeout_cancels_an_awaiting_test_which_cleans_up(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_waits="""
        import asyncio
        from pathlib import Path

        import pytest

        @pytest.mark.timeout(1)
        async def test_waits_forever(tmp_path_factory):
            marker = tmp_path_factory.getbasetemp() / "cleaned"
            try:
                await asyncio.Event().wait()
            finally:
                marker.write_text("yes")

        async def test_next(tmp_path_factory):
            assert (tmp_path_factory.getbasetemp() / "cleaned").read_text() == "yes"
        """
    )
    result = _run(inner, "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*CancelledError: streamwal-guard: Timeout: the test ran over its 1 s",
            "*the event loop was idle in its selector*",
            "*=== asyncio tasks ===*",
            "*coro=<test_waits_forever() running at *test_waits.py:10>*",
        ]
    )


def test_a_test_that_will_not_end_is_killed_with_its_children(
    inner: pytest.Pytester, child: _Child
) -> None:
    inner.makepyfile(
        test_stuck="""
        import time

        import pytest
        from children import start_a_child

        @pytest.mark.timeout(1)
        def test_swallows_everything():
            start_a_child()
            while True:
                try:
                    time.sleep(5)
                except BaseException:
                    pass
        """
    )
    started = time.monotonic()
    result = _run(inner, "-o", "guard_timeout_grace=3")
    assert time.monotonic() - started < 60
    assert result.ret == 3
    err = result.stderr.str()
    assert "did not end within 3 s of being interrupted" in err
    assert "killed 1 process(es): ['sleep']" in err
    assert "test_swallows_everything" in err  # the stacks
    assert child.gone(within=5)


def test_the_summary_names_peak_rss_growth_slowest_tests_and_leftover_children(
    inner: pytest.Pytester, child: _Child
) -> None:
    inner.makepyfile(
        test_summary="""
        import time

        from children import start_a_child

        def test_slow():
            time.sleep(0.5)

        def test_leaves_a_child():
            start_a_child()
        """
    )
    result = _run(inner)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*streamwal-guard: resources*",
            "peak RSS of the pytest process: * MB (now * MB; bounds: 200 MB per test, "
            "2048 MB per session)",
            "largest RSS growth per test (after its teardown):",
            "*MB  test_summary.py::test_*",
            "slowest tests (setup + call + teardown):",
            "*0.5 s   test_summary.py::test_slow",
            "*s   test_summary.py::test_leaves_a_child",
            "killed 1 leftover child process(es): * sleep",
        ]
    )
    assert child.gone()


def _terminated(
    folder: Path, child: _Child, *args: str, sigint_ignored: bool = False
) -> tuple[int, str, float]:
    """Run pytest (with the guard) in ``folder``, SIGTERM it once its test started its
    ``child``: its exit code, its output and the seconds from the signal to the exit.
    ``sigint_ignored``: started as a non-interactive shell starts a background job,
    with SIGINT ignored."""
    command = [sys.executable, "-m", "pytest", "-p", "tests.guard", "-p", "no:cacheprovider"]
    if sigint_ignored:  # the shell's exec keeps the ignored disposition, as its jobs do
        command = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *command]
    proc = subprocess.Popen(
        [*command, *args], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while not child.started():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        waited = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out.decode(errors="replace"), waited


@pytest.mark.parametrize(
    ("phase", "sigint_ignored"), [("setup", False), ("call", False), ("call", True)]
)
def test_sigterm_stops_the_run_with_teardown_and_kills_its_children(
    inner: pytest.Pytester, child: _Child, phase: str, sigint_ignored: bool
) -> None:
    """A cancelled run (SIGTERM) still tears down and leaves no child behind, also
    when it is stopped in a fixture (pytest's ``tmp_path`` then has no report), and
    when it was started with SIGINT ignored (a background job of a script)."""
    events = inner.path / "events"
    inner.makepyfile(
        test_cancelled=f"""
        import asyncio

        import pytest
        from children import start_a_child

        def note(event):
            with open({str(events)!r}, "a") as out:
                out.write(event + "\\n")

        @pytest.fixture
        async def marks_teardown():
            yield
            await asyncio.sleep(0.2)
            note("fixture torn down")

        @pytest.fixture
        async def stuck_in_setup(tmp_path):
            start_a_child()
            try:
                await asyncio.sleep(1000)
            finally:
                note("stuck code unwound")

        async def test_stuck_in_setup(marks_teardown, stuck_in_setup):
            pass

        async def test_stuck_in_call(marks_teardown, tmp_path):
            start_a_child()
            try:
                while True:
                    await asyncio.sleep(0.05)
                    note("still running")
            finally:
                note("stuck code unwound")

        def test_never_run():
            pass
        """
    )
    code, text, _waited = _terminated(
        inner.path, child, "-k", f"stuck_in_{phase} or never_run", sigint_ignored=sigint_ignored
    )
    assert code == pytest.ExitCode.INTERRUPTED, text
    assert "streamwal-guard: SIGTERM: stopping the run" in text
    assert "KeyboardInterrupt" in text
    assert "Traceback" not in text
    # the stuck code unwound first, as on Ctrl-C: nothing of it ran during the teardown
    noted = [e for e in events.read_text().splitlines() if e != "still running"]
    assert noted == ["stuck code unwound", "fixture torn down"], events.read_text()
    assert events.read_text().splitlines()[-2:] == noted
    assert "killed 1 leftover child process(es):" in text
    assert child.gone()


def test_a_run_that_will_not_stop_after_sigterm_is_ended_with_its_children(
    inner: pytest.Pytester, child: _Child
) -> None:
    inner.makepyfile(
        test_deaf="""
        import asyncio

        from children import start_a_child

        async def test_swallows_its_cancellation():
            start_a_child()
            while True:
                try:
                    await asyncio.sleep(1000)
                except asyncio.CancelledError:
                    pass
        """
    )
    code, text, waited = _terminated(inner.path, child, "-o", "guard_timeout_grace=3")
    assert 2.5 < waited < 20, text
    assert code == 128 + signal.SIGTERM, text
    assert "streamwal-guard: 3 s after SIGTERM: killed 1 process(es) ['sleep']" in text
    assert child.gone()
