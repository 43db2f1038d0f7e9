"""A pytest plugin that keeps the suite within the machine: memory, time and children.

Why it exists (issue 26): a run on a slow machine grew the pytest process to 22.9 GB
over 72 minutes, and the 300 s timeout never fired. So this plugin

* measures each test's RSS growth (after its teardown against before its setup) and
  fails a test that grew the process by more than ``guard_rss_test_mb``, naming the
  top allocation sites tracemalloc saw, and fails (and stops) the run once the
  process is above ``guard_rss_session_mb`` - checked by a sampler thread while the
  test runs, so a runaway test is stopped when it crosses the bound, not after it has
  eaten the machine;
* makes timeouts fire on an asyncio suite. pytest-timeout's ``signal`` method raises
  from a SIGALRM handler wherever the main thread happens to be; when that is inside
  an event loop callback (a busy loop: gRPC, writer tasks), ``asyncio.Handle._run``
  logs the exception and the test goes on. Its ``thread`` method ends the whole
  session with ``os._exit``. This plugin takes over pytest-timeout's timer (same
  settings: ``timeout``, ``--timeout``, ``@pytest.mark.timeout``) and escalates:
  at the timeout it prints every thread's and every asyncio task's stack and cancels
  the test's task if the loop is idle (the test unwinds through its ``finally``
  blocks), or raises in the main thread if the loop is blocked; while the loop stays
  blocked it raises again each second; ``guard_timeout_grace`` seconds later it kills
  the processes the test started and exits the process;
* kills, at the end of the session (and after a test that timed out), the processes
  descended from pytest that were not there before it, except those that detached
  into their own session on purpose (the local stack, reused across runs);
* stops the run on SIGTERM as on Ctrl-C, so teardown and that last kill still run
  when a run is cancelled (the children themselves die with the process that
  started them: :func:`streamwal_lab.stack.process.die_with_parent`);
* prints at the end the peak RSS of the process, the tests that grew it most and the
  slowest tests.

Tracemalloc costs CPU on every allocation, so by default (``auto``) it starts only
when a test has grown the process by a quarter of the per-test bound, and stops when
that test ends; ``always`` traces every test (one frame is cheap enough for a
targeted run: see docs/testing.md); ``off`` never traces.

Options (ini, or the environment variable, which wins): ``guard_rss_test_mb``
(``STREAMWAL_GUARD_RSS_TEST_MB``, 200), ``guard_rss_session_mb``
(``STREAMWAL_GUARD_RSS_SESSION_MB``, 2048), ``guard_tracemalloc``
(``STREAMWAL_GUARD_TRACEMALLOC``, auto), ``guard_tracemalloc_frames``
(``STREAMWAL_GUARD_TRACEMALLOC_FRAMES``, 5), ``guard_timeout_grace``
(``STREAMWAL_GUARD_TIMEOUT_GRACE``, 30), ``guard_summary_count``
(``STREAMWAL_GUARD_SUMMARY_COUNT``, 10). A bound of 0 disables it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import faulthandler
import gc
import inspect
import io
import linecache
import os
import signal
import sys
import threading
import time
import traceback
import tracemalloc
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO, cast

import pytest

try:
    from _pytest.tmpdir import tmppath_result_key as _TMP_PATH_RESULTS
except ImportError:  # another pytest: an interrupted setup may end in a KeyError
    _TMP_PATH_RESULTS = None  # type: ignore[assignment]

__all__ = ["descendants", "kill_processes", "rss_bytes"]

_MB = 1024 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK_S = 0.1
_OPTIONS: dict[str, tuple[str, str, str]] = {
    # ini name: (environment variable, default, help)
    "guard_rss_test_mb": (
        "STREAMWAL_GUARD_RSS_TEST_MB",
        "200",
        "fail a test that grows the pytest process by more than this many MB (0: never)",
    ),
    "guard_rss_session_mb": (
        "STREAMWAL_GUARD_RSS_SESSION_MB",
        "2048",
        "stop the run once the pytest process is above this many MB of RSS (0: never)",
    ),
    "guard_tracemalloc": (
        "STREAMWAL_GUARD_TRACEMALLOC",
        "auto",
        "auto (trace a test once it has grown by a quarter of the bound), always, or off",
    ),
    "guard_tracemalloc_frames": (
        "STREAMWAL_GUARD_TRACEMALLOC_FRAMES",
        "5",
        "frames tracemalloc keeps per allocation",
    ),
    "guard_timeout_grace": (
        "STREAMWAL_GUARD_TIMEOUT_GRACE",
        "30",
        "seconds a timed-out test has to end before the process is killed",
    ),
    "guard_summary_count": (
        "STREAMWAL_GUARD_SUMMARY_COUNT",
        "10",
        "tests listed in the end-of-run summary (largest growth, slowest)",
    ),
}


# -- /proc ---------------------------------------------------------------------------


def rss_bytes(pid: int | str = "self") -> int:
    """The resident set size now (``/proc/<pid>/statm``: no psutil needed)."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def _released_rss() -> int:
    """RSS once garbage is collected and the C heap's free pages are given back
    (glibc's ``malloc_trim``): a test that built large buffers and dropped them keeps
    none of it, but glibc holds freed pages until asked, which would count against it."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_bytes()


def peak_rss_bytes() -> int:
    """The process's high-water mark of RSS (``VmHWM``), whatever sampling missed."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int
    name: str


def _processes() -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                raw = stat.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        procs[int(entry.name)] = Proc(int(entry.name), int(fields[1]), int(fields[3]), name)
    return procs


def descendants(root: int | None = None) -> dict[int, Proc]:
    """Every living process below ``root`` (default: this one), from ``/proc``."""
    root = os.getpid() if root is None else root
    procs = _processes()
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found: dict[int, Proc] = {}
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found[pid] = procs[pid]
        stack.extend(children.get(pid, []))
    return found


def kill_processes(procs: dict[int, Proc]) -> list[Proc]:
    """SIGKILL ``procs`` (leaves first does not matter with SIGKILL) and reap our own
    children; the ones that were still there."""
    killed = []
    for proc in procs.values():
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed.append(proc)
    me = os.getpid()
    for proc in killed:
        if proc.ppid == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(proc.pid, 0)
    return killed


def _left_behind(before: set[int]) -> dict[int, Proc]:
    """Descendants not in ``before``, but not those in a session of their own: a
    child that called setsid meant to outlive us (the local stack's servers)."""
    sid = os.getsid(0)
    return {p: proc for p, proc in descendants().items() if p not in before and proc.sid == sid}


# -- stacks ----------------------------------------------------------------------------


def _task_stacks(loop: asyncio.AbstractEventLoop | None) -> str:
    if loop is None:
        return "(no event loop running in the main thread)\n"
    out = io.StringIO()
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError:  # the set changed under us
        tasks = []
    out.write(f"{len(tasks)} asyncio task(s):\n")
    for task in tasks:
        out.write(f"--- {task!r}\n")
        with contextlib.suppress(Exception):
            task.print_stack(file=out)
    return out.getvalue()


def _thread_stacks(skip_current: bool = True) -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    out = io.StringIO()
    for ident, frame in sys._current_frames().items():
        if skip_current and ident == me:
            continue
        out.write(f"--- thread {names.get(ident, '?')} ({ident})\n")
        out.write("".join(traceback.format_stack(frame)))
    return out.getvalue()


def _idle_in_select(frame: FrameType | None) -> bool:
    """Whether the main thread is waiting in the event loop's selector: the loop is
    alive, and a cancelled task gets to run its cleanup."""
    return frame is not None and Path(frame.f_code.co_filename).name == "selectors.py"


def _root_task(loop: asyncio.AbstractEventLoop, item: pytest.Item) -> asyncio.Task[Any] | None:
    """The task ``run_until_complete`` waits on (pytest-asyncio runs each test, and
    each async fixture step, as one), else the task running the test function."""
    tasks = list(asyncio.all_tasks(loop))
    for task in tasks:
        callbacks = getattr(task, "_callbacks", None) or []
        if any(getattr(cb, "__name__", "") == "_run_until_complete_cb" for cb, _ in callbacks):
            return task
    function = getattr(item, "function", None)
    code = getattr(inspect.unwrap(function), "__code__", None) if function else None
    for task in tasks:
        coro: Any = task.get_coro()
        while coro is not None:
            if getattr(coro, "cr_code", None) is code:
                return task
            coro = getattr(coro, "cr_await", None)
    return None


# -- state -----------------------------------------------------------------------------


@dataclass
class _TestState:
    item: pytest.Item
    started: float
    rss_before: int
    children_before: set[int]
    deadline: float | None = None
    timeout: float = 0.0
    reason: str | None = None  # why the guard interrupted it
    interrupted_at: float | None = None
    dump: str = ""
    traced: bool = False  # tracemalloc was started for this test
    finished: bool = False


@dataclass
class _Settings:
    test_bytes: int
    session_bytes: int
    tracemalloc_mode: str
    frames: int
    grace_s: float
    summary: int


def _setting(config: pytest.Config, name: str) -> str:
    env, default, _help = _OPTIONS[name]
    value = os.environ.get(env)
    if value is None:
        value = str(config.getini(name) or default)
    return value


def _settings(config: pytest.Config) -> _Settings:
    mode = _setting(config, "guard_tracemalloc")
    if mode not in ("auto", "always", "off"):
        raise pytest.UsageError(f"guard_tracemalloc: auto, always or off, not {mode!r}")
    return _Settings(
        test_bytes=int(float(_setting(config, "guard_rss_test_mb")) * _MB),
        session_bytes=int(float(_setting(config, "guard_rss_session_mb")) * _MB),
        tracemalloc_mode=mode,
        frames=max(1, int(_setting(config, "guard_tracemalloc_frames"))),
        grace_s=float(_setting(config, "guard_timeout_grace")),
        summary=int(_setting(config, "guard_summary_count")),
    )


@dataclass
class _Record:
    nodeid: str
    growth: int = 0
    seconds: float = 0.0


#: a teardown report's user property carrying (growth, seconds, the process's peak RSS):
#: how an xdist worker's figures reach the controller, which prints the summary
_REPORTED = "streamwal-guard"


class Guard:
    """The plugin object; one per session (registered as ``streamwal-guard``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.settings = _settings(config)
        self.records: dict[str, _Record] = {}
        self.workers_peak = 0  # the largest peak RSS an xdist worker reported
        self.current: _TestState | None = None
        self.paused: _TestState | None = None  # between two runs of one test (resume)
        self.lock = threading.Lock()
        self.pending: tuple[str, str] | None = None  # (action, reason) for the main thread
        self.sampled_peak = 0
        self.children_at_start: set[int] = set()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.previous_handler: Any = None
        self.previous_term: Any = None
        self.sigint_ignored = False
        self.terminated = False
        self.over_session_bound: str | None = None
        self.killed_at_end: list[Proc] = []
        self.main_ident = threading.main_thread().ident or 0

    # -- session ------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.children_at_start = set(descendants())
        if self.settings.tracemalloc_mode == "always" and not tracemalloc.is_tracing():
            tracemalloc.start(self.settings.frames)
        if threading.current_thread() is threading.main_thread():
            self.previous_handler = signal.signal(signal.SIGALRM, self._on_signal)
            self.previous_term = signal.signal(signal.SIGTERM, self._on_term)
            # a run started in the background by a non-interactive shell inherits SIGINT
            # ignored; asyncio's Runner then installs no handler of its own, and SIGTERM
            # could not cancel the test's task (see _on_term): Python's own handler back
            if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                self.sigint_ignored = True
        self.thread = threading.Thread(target=self._watch, name="streamwal-guard", daemon=True)
        self.thread.start()

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, object, object]:
        # after the session's fixtures are torn down, and also when that failed (an
        # interrupted run's teardown may raise): the leftovers are killed either way
        try:
            return (yield)
        finally:
            if self.previous_term is not None:  # a SIGTERM now must not skip the kill
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self.stop.set()
            if self.thread is not None:
                self.thread.join(5)
            if self.previous_handler is not None:
                signal.signal(signal.SIGALRM, self.previous_handler)
            self.killed_at_end = kill_processes(_left_behind(self.children_at_start))
            if self.previous_term is not None:
                signal.signal(signal.SIGTERM, self.previous_term)
            if self.sigint_ignored:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            if self.over_session_bound and session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    # -- per test -----------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        state = _TestState(item, time.monotonic(), rss_bytes(), set(descendants()))
        if _TMP_PATH_RESULTS is not None:
            # pytest's tmp_path teardown expects a report of the setup, which a run
            # interrupted (SIGTERM, Ctrl-C) in a fixture never makes: without one its
            # KeyError would end the session before the leftovers are killed
            item.stash.setdefault(_TMP_PATH_RESULTS, {})
        if tracemalloc.is_tracing() and self.settings.tracemalloc_mode == "always":
            tracemalloc.clear_traces()  # what is traced at teardown is what this test kept
        with self.lock:
            self.current = state
        try:
            return (yield)
        finally:
            with self.lock:
                # the state of its last run, when a plugin ran the test again (resume)
                last = self.current if self.current is not None else state
                state.finished = last.finished = True
                self.current = self.paused = None
            if (state.traced or last.traced) and self.settings.tracemalloc_mode == "auto":
                tracemalloc.stop()
            if last.reason is not None:  # interrupted: do not let its children linger
                kill_processes(_left_behind(last.children_before))

    # -- a test run again (tests/stack_watch.py) ------------------------------------------

    def pause(self, item: pytest.Item) -> None:
        """Between two runs of ``item``: no timeout, signal or sample until :meth:`resume`
        (what runs meanwhile, such as a broker's restart, is not the test's)."""
        with self.lock:
            if self.current is not None and self.current.item is item:
                self.paused, self.current = self.current, None

    def resume(self, item: pytest.Item) -> None:
        """``item`` runs again: its own timeout from now and its growth from here, as a
        test of its own; the processes an interrupted first run left are killed now."""
        with self.lock:
            paused, self.paused = self.paused, None
        if paused is None or paused.item is not item:
            return
        if paused.reason is not None:
            kill_processes(_left_behind(paused.children_before))
        fresh = _TestState(item, time.monotonic(), rss_bytes(), set(descendants()))
        if paused.timeout:
            fresh.timeout = paused.timeout
            fresh.deadline = fresh.started + paused.timeout
        with self.lock:
            self.current = fresh

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool:
        """pytest-timeout's own timer does not fire in a busy event loop (see the
        module docstring): this plugin's watcher thread keeps the deadline instead."""
        with self.lock:
            if self.current is not None and self.current.item is item:
                self.current.timeout = float(settings.timeout)
                self.current.deadline = time.monotonic() + self.current.timeout
        return True

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> bool:
        with self.lock:
            if self.current is not None and self.current.reason is None:
                self.current.deadline = None
        return True

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        state = self.current
        if state is None or state.item is not item:
            return report
        if state.dump:
            report.sections.append((f"streamwal-guard: {state.reason}", state.dump))
            state.dump = ""
        if call.when == "teardown":
            self._check_growth(item, state, report)
        return report

    def _check_growth(
        self, item: pytest.Item, state: _TestState, report: pytest.TestReport
    ) -> None:
        now = rss_bytes()
        if self.settings.test_bytes and now - state.rss_before > self.settings.test_bytes // 4:
            now = _released_rss()
        growth = now - state.rss_before
        record = self.records.setdefault(item.nodeid, _Record(item.nodeid))
        record.growth = growth
        record.seconds = time.monotonic() - state.started
        peak = max(peak_rss_bytes(), self.sampled_peak)
        report.user_properties.append((_REPORTED, (growth, record.seconds, peak)))
        problems = []
        bound = self.settings.test_bytes
        if bound and growth > bound:
            problems.append(
                f"the test grew the pytest process by {growth / _MB:.0f} MB "
                f"(RSS {state.rss_before / _MB:.0f} -> {now / _MB:.0f} MB), "
                f"above the bound of {bound / _MB:.0f} MB (guard_rss_test_mb)"
            )
        limit = self.settings.session_bytes
        if limit and max(now, self.sampled_peak) > limit:
            problems.append(
                f"the pytest process reached {max(now, self.sampled_peak) / _MB:.0f} MB, "
                f"above the session bound of {limit / _MB:.0f} MB (guard_rss_session_mb): "
                "the run stops here"
            )
            self.over_session_bound = problems[-1]
            item.session.shouldstop = "streamwal-guard: RSS above the session bound"
        if not problems:
            return
        text = "\n".join(problems) + "\n\n" + self._allocation_sites(growth)
        if report.passed:
            report.outcome = "failed"
            report.longrepr = text
        else:
            report.sections.append(("streamwal-guard: memory", text))

    def _allocation_sites(self, growth: int) -> str:
        if not tracemalloc.is_tracing():
            return (
                "tracemalloc was off (guard_tracemalloc=off, or the growth came in one "
                "step before it could start): rerun the test with "
                "STREAMWAL_GUARD_TRACEMALLOC=always to see where it allocates"
            )
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
        )
        stats = snapshot.statistics("traceback")
        traced = sum(s.size for s in stats)
        lines = [
            "top allocation sites still alive at the end of the test (tracemalloc, "
            f"{traced / _MB:.1f} MB traced of the {growth / _MB:.0f} MB growth; the rest "
            "is native memory, or was allocated before tracing started):"
        ]
        for stat in [s for s in stats if s.size >= _MB // 10][:8] or stats[:1]:
            lines.append(f"  {stat.size / _MB:8.1f} MB in {stat.count} blocks, allocated at")
            for frame in reversed(stat.traceback):  # the allocating line first
                source = linecache.getline(frame.filename, frame.lineno).strip()
                lines.append(f"    {frame.filename}:{frame.lineno}: {source}")
        return "\n".join(lines)

    # -- the watcher thread ---------------------------------------------------------------

    def _watch(self) -> None:
        """Samples RSS, starts tracemalloc when a test grows, and escalates a timeout or
        a session above its bound: the main thread is asked (SIGALRM) to cancel the
        test's task, asked again to raise while the loop stays blocked, and ``grace``
        seconds later the process ends."""
        seen_idle = False
        last_check = 0.0
        while not self.stop.wait(_TICK_S):
            with self.lock:
                state = self.current
            if state is None or state.finished:
                continue
            now = time.monotonic()
            rss = rss_bytes()
            self.sampled_peak = max(self.sampled_peak, rss)
            if (
                self.settings.tracemalloc_mode == "auto"
                and self.settings.test_bytes
                and not tracemalloc.is_tracing()
                and rss - state.rss_before > self.settings.test_bytes / 4
            ):
                tracemalloc.start(self.settings.frames)
                state.traced = True
            if state.interrupted_at is None:
                limit = self.settings.session_bytes
                if limit and rss > limit:
                    reason = (
                        f"RSS {rss / _MB:.0f} MB is above the session bound of "
                        f"{limit / _MB:.0f} MB (guard_rss_session_mb)"
                    )
                    self.over_session_bound = reason
                elif state.deadline is not None and now > state.deadline:
                    reason = f"Timeout: the test ran over its {state.timeout:g} s"
                else:
                    continue
                state.reason, state.interrupted_at = reason, now
                seen_idle, last_check = False, now
                self._ask_main("cancel", reason)
                continue
            # interrupted and still running: a live loop passes through its selector;
            # one that never does is blocked, and is raised into again each second
            seen_idle = seen_idle or _idle_in_select(sys._current_frames().get(self.main_ident))
            if now - last_check >= 1.0:
                # a live loop: cancel the test's task again (the first signal may have
                # landed in a busy task's callback, where asyncio logs what it raised and
                # goes on); a blocked one: raise into it again
                self._ask_main("cancel" if seen_idle else "raise", state.reason or "")
                seen_idle, last_check = False, now
            if now > state.interrupted_at + self.settings.grace_s:
                self._exit(state)

    def _ask_main(self, action: str, reason: str) -> None:
        self.pending = (action, reason)
        with contextlib.suppress(Exception):
            signal.pthread_kill(self.main_ident, signal.SIGALRM)

    def _exit(self, state: _TestState) -> None:
        """The test did not end ``grace`` seconds after it was interrupted: nothing in
        the process can stop it. Say what every thread was doing, kill what it started,
        and end the run (as pytest-timeout's ``thread`` method does)."""

        def preface(err: TextIO, capman: Any) -> None:
            if capman is not None:  # the test's output, and ours, to the real stdout/stderr
                out, captured_err = capman.read_global_capture()
                sys.stdout.write(out)
                sys.stdout.flush()
                err.write(captured_err)
            err.write(
                f"\n{'+' * 30} streamwal-guard {'+' * 30}\n"
                f"{state.item.nodeid}: {state.reason}; it did not end within "
                f"{self.settings.grace_s:g} s of being interrupted: killing the processes "
                "it started and exiting\n"
            )
            err.flush()
            faulthandler.dump_traceback(file=err, all_threads=True)

        def report(err: TextIO, killed: list[Proc]) -> None:
            err.write(f"killed {len(killed)} process(es): {[p.name for p in killed]}\n")
            err.write(f"peak RSS of the pytest process: {peak_rss_bytes() / _MB:.0f} MB\n")

        self._kill_and_exit(3, state.children_before, report, preface)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Runs in the main thread, between two bytecodes of whatever it was doing."""
        pending, self.pending = self.pending, None
        state = self.current
        if pending is None or state is None:
            return
        action, reason = pending
        loop = asyncio.events._get_running_loop()
        idle = _idle_in_select(frame)
        if action == "cancel":
            if not state.dump:  # the first time: what every thread and task was doing
                state.dump = (
                    f"{reason}; the event loop was "
                    f"{'idle in its selector' if idle else 'busy or blocked'}.\n"
                    f"=== threads ===\n{_thread_stacks(skip_current=False)}"
                    f"=== asyncio tasks ===\n{_task_stacks(loop)}"
                )
                self._say(f"streamwal-guard: {state.item.nodeid}: {reason} (stacks in its report)")
            if loop is not None and idle:
                task = _root_task(loop, state.item)
                if task is not None:
                    # threadsafe: it also wakes the selector, which resumes its wait
                    # after this handler and would not see a plain call_soon
                    loop.call_soon_threadsafe(task.cancel, f"streamwal-guard: {reason}")
                    return
        __tracebackhide__ = True
        pytest.fail(f"streamwal-guard: {reason}", pytrace=False)

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM (a cancelled CI job, ``kill``) stops the run as Ctrl-C does, so the
        tests' ``finally`` blocks, the fixtures' teardown and the end of the session
        (which kills leftover children) still run: a run killed outright leaves its
        nodes writing to the shared stack and its private brokers' data on disk.

        "As Ctrl-C does" means through the SIGINT handler in place: while an async test
        runs, asyncio's ``Runner`` has one that cancels the test's task, so the test
        unwinds before its fixtures are torn down (a ``KeyboardInterrupt`` raised here
        would leave the task pending, still running during the teardown). A second
        SIGTERM, or ``guard_timeout_grace`` seconds without an end, kills what the run
        started and exits."""
        if self.terminated:
            self._end_now(signum, "a second SIGTERM")
        self.terminated = True
        self._say("streamwal-guard: SIGTERM: stopping the run (a second SIGTERM ends it now)")
        deadline = threading.Timer(
            self.settings.grace_s,
            self._end_now,
            (signum, f"{self.settings.grace_s:g} s after SIGTERM"),
        )
        deadline.daemon = True
        deadline.start()
        on_interrupt = signal.getsignal(signal.SIGINT)
        if callable(on_interrupt) and on_interrupt is not signal.default_int_handler:
            on_interrupt(signal.SIGINT, frame)
            return
        raise KeyboardInterrupt("SIGTERM")

    def _end_now(self, signum: int, why: str) -> None:
        """The run did not stop in time: kill what it started and exit (any thread)."""

        def report(err: TextIO, killed: list[Proc]) -> None:
            err.write(
                f"\nstreamwal-guard: {why}: killed {len(killed)} process(es) "
                f"{[p.name for p in killed]} and exiting\n"
            )

        self._kill_and_exit(128 + signum, self.children_at_start, report)

    def _kill_and_exit(
        self,
        code: int,
        before: set[int],
        report: Callable[[TextIO, list[Proc]], None],
        preface: Callable[[TextIO, Any], None] | None = None,
    ) -> NoReturn:
        """Kill the processes started since ``before`` and exit with ``code`` at once,
        from any thread: what is stuck cannot be unwound. Output goes to the real
        stderr, not a test's captured output: ``preface`` (given pytest's capture
        manager) writes before the kill, ``report`` what was killed."""
        err = sys.__stderr__ or sys.stderr
        capman = self.config.pluginmanager.getplugin("capturemanager")
        with contextlib.suppress(Exception):
            if capman is not None:
                capman.suspend_global_capture(in_=True)
            if preface is not None:
                preface(err, capman)
        with contextlib.suppress(Exception):  # the kill, even if the preface failed
            report(err, kill_processes(_left_behind(before)))
            err.flush()
        os._exit(code)

    def _say(self, text: str) -> None:
        """A line on the real terminal now, not in the test's captured output: whoever
        watches a run that seems stuck sees why it moves on."""
        capman = self.config.pluginmanager.getplugin("capturemanager")
        terminal = self.config.get_terminal_writer()
        with contextlib.suppress(Exception):
            disabled = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
            with disabled:
                terminal.line()
                terminal.line(text, yellow=True)
                terminal.flush()

    # -- the summary ----------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A worker's figures, in the controller of an xdist run (xdist marks the
        reports it relays with their ``node``; a run of one process has its records)."""
        for key, value in report.user_properties:
            if key == _REPORTED and hasattr(report, "node"):
                growth, seconds, peak = cast(tuple[int, float, int], value)
                record = self.records.setdefault(report.nodeid, _Record(report.nodeid))
                record.growth, record.seconds = int(growth), float(seconds)
                self.workers_peak = max(self.workers_peak, int(peak))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        count = self.settings.summary
        peak = max(peak_rss_bytes(), self.sampled_peak)
        tr.write_sep("=", "streamwal-guard: resources")
        tr.write_line(
            f"peak RSS of the pytest process: {peak / _MB:.0f} MB "
            f"(now {rss_bytes() / _MB:.0f} MB; bounds: "
            f"{self.settings.test_bytes / _MB:.0f} MB per test, "
            f"{self.settings.session_bytes / _MB:.0f} MB per session)"
        )
        if self.workers_peak:
            tr.write_line(f"peak RSS of the largest xdist worker: {self.workers_peak / _MB:.0f} MB")
        if self.over_session_bound:
            tr.write_line(f"the run was stopped: {self.over_session_bound}")
        records = list(self.records.values())
        if records:
            tr.write_line("largest RSS growth per test (after its teardown):")
            for rec in sorted(records, key=lambda r: -r.growth)[:count]:
                tr.write_line(f"  {rec.growth / _MB:+8.1f} MB  {rec.nodeid}")
            tr.write_line("slowest tests (setup + call + teardown):")
            for rec in sorted(records, key=lambda r: -r.seconds)[:count]:
                tr.write_line(f"  {rec.seconds:8.1f} s   {rec.nodeid}")
        if self.killed_at_end:
            names = ", ".join(f"{p.pid} {p.name}" for p in self.killed_at_end)
            tr.write_line(f"killed {len(self.killed_at_end)} leftover child process(es): {names}")


def _iter_options() -> Iterator[tuple[str, str, str]]:
    for name, (env, default, help_) in _OPTIONS.items():
        yield name, f"{help_} (env {env}, default {default})", default


def pytest_addoption(parser: pytest.Parser) -> None:
    for name, help_, _default in _iter_options():
        parser.addini(name, help_, default=None)


def pytest_configure(config: pytest.Config) -> None:
    if not sys.platform.startswith("linux"):  # /proc
        return
    config.pluginmanager.register(Guard(config), "streamwal-guard")
