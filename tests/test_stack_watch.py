"""The stack watch (:mod:`tests.stack_watch`) runs a test again only when the broker it
met was broken, and says so; its health check tells a serving broker from one that is
not.

The re-run cases run a small pytest session in a subprocess (``pytester``) whose watch
probes a flag file and "heals" by removing it, so a broken broker can be had on demand.
The health check is asked of the real stack broker and of local HTTP servers that
answer wrongly or not at all.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamwal_lab.stack import StackInfo
from tests.stack_watch import broker_unhealthy

pytest_plugins = ["pytester"]

_ROOT = Path(__file__).resolve().parent.parent

_CONFTEST = """
import time
from pathlib import Path

import pytest

from tests.stack_watch import HealFailed, StackWatch

HERE = Path(__file__).parent
BROKEN = HERE / "broken"
HEALS = HERE / "heals"


def probe():
    if (HERE / "probe_raises").exists():
        raise ConnectionResetError("reset by peer")
    if (HERE / "slow_probe").exists():
        time.sleep(1.5)
    return "health check answered HTTP 500" if BROKEN.exists() else None


def heal(why):
    with HEALS.open("a") as f:
        f.write(why + "\\n")
    if (HERE / "heal_fails").exists():
        raise HealFailed("restart failed after 1s: no bookie")
    BROKEN.unlink(missing_ok=True)
    return "Pulsar restarted in 0s"


def pytest_configure(config):
    config.pluginmanager.register(StackWatch(probe, heal), "stack-watch")


@pytest.fixture(scope="session")
def stack():
    return "the shared stack"


def count(name):
    # one more mark in the file name; how many it has now
    path = Path(__file__).with_name(name)
    with path.open("a") as f:
        f.write("x\\n")
    return path.read_text().count("x")


def break_the_broker():
    BROKEN.touch()
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(_ROOT))
    pytester.makeconftest(_CONFTEST)
    return pytester


def _run(pytester: pytest.Pytester) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", timeout=90)


def test_a_test_that_broke_on_a_broken_broker_runs_again_once_healed(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(
        test_it="""
        from conftest import break_the_broker, count

        def test_meets_the_hang(stack):
            if count("runs") == 1:
                break_the_broker()  # the broker hangs during the first run
                raise TimeoutError("the broker did not answer")
        """
    )
    result = _run(inner)
    result.assert_outcomes(passed=1)
    assert (inner.path / "runs").read_text().count("x") == 2
    assert (inner.path / "heals").read_text() == "health check answered HTTP 500\n"
    out = result.stdout.str()
    assert "stack-watch: the shared broker stopped serving" in out
    assert "test_meets_the_hang: health check answered HTTP 500" in out
    assert "passed when run again" in out
    assert "TimeoutError: the broker did not answer" in out


def test_a_test_failing_on_a_healthy_broker_fails_once_and_is_not_run_again(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(
        test_it="""
        from conftest import count

        def test_a_real_bug(stack):
            count("runs")
            assert 1 + 1 == 3
        """
    )
    result = _run(inner)
    result.assert_outcomes(failed=1)
    assert (inner.path / "runs").read_text().count("x") == 1
    assert not (inner.path / "heals").exists()
    assert "stack-watch" not in result.stdout.str()


def test_a_test_that_fails_again_after_the_restart_is_reported_failed(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(
        test_it="""
        from conftest import break_the_broker

        def test_always_breaks_it(stack):
            break_the_broker()
            raise ConnectionError("no broker")

        def test_after_it(stack):
            pass
        """
    )
    result = _run(inner)
    result.assert_outcomes(failed=1, passed=1)
    # one restart: a test runs again once at most, and the run after it passed
    assert (inner.path / "heals").read_text().count("HTTP 500") == 1
    assert "test_always_breaks_it: health check answered HTTP 500" in result.stdout.str()
    assert "failed again" in result.stdout.str()


def test_a_module_fixture_that_failed_on_the_broken_broker_is_set_up_again(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(
        test_it="""
        import pytest
        from conftest import break_the_broker, count

        @pytest.fixture(scope="module")
        def topic(stack):
            if count("setups") == 1:
                break_the_broker()
                raise TimeoutError("could not create the topic")
            return "topic"

        def test_uses_the_topic(topic):
            assert topic == "topic"
        """
    )
    result = _run(inner)
    result.assert_outcomes(passed=1)
    assert (inner.path / "setups").read_text().count("x") == 2


def test_a_heal_that_fails_is_reported_and_not_tried_again(inner: pytest.Pytester) -> None:
    (inner.path / "heal_fails").touch()
    inner.makepyfile(
        test_it="""
        from conftest import break_the_broker, count

        def test_first(stack):
            count("runs")
            break_the_broker()
            assert False

        def test_second(stack):
            count("runs")
            assert False
        """
    )
    result = _run(inner)
    result.assert_outcomes(failed=2)
    assert (inner.path / "runs").read_text().count("x") == 2  # neither run again
    assert (inner.path / "heals").read_text().count("HTTP 500") == 1  # one try only
    out = result.stdout.str()
    assert "stack-watch: the shared broker could not be healed" in out
    assert "restart failed after 1s: no bookie" in out


def test_a_health_check_that_raises_counts_as_a_broken_broker(inner: pytest.Pytester) -> None:
    (inner.path / "probe_raises").touch()
    inner.makepyfile(
        test_it="""
        from conftest import count

        def test_it(stack):
            assert count("runs") == 2
        """
    )
    result = _run(inner)
    result.assert_outcomes(passed=1)
    heals = (inner.path / "heals").read_text()
    assert heals == "health check raised ConnectionResetError: reset by peer\n"


def test_a_test_that_timed_out_is_run_again_with_a_timeout_of_its_own(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard times the test out, the (slow) health check runs untimed, and the
    second run has its own timeout: it is cut at 1 s again if it hangs again."""
    for name in [n for n in __import__("os").environ if n.startswith("STREAMWAL_GUARD_")]:
        monkeypatch.delenv(name)
    (inner.path / "slow_probe").touch()
    inner.makeini(
        """
        [pytest]
        asyncio_mode = auto
        asyncio_default_fixture_loop_scope = session
        asyncio_default_test_loop_scope = session
        timeout = 1
        guard_timeout_grace = 5
        """
    )
    inner.makepyfile(
        test_it="""
        import asyncio

        from conftest import break_the_broker, count

        async def test_hangs_on_the_broken_broker(stack):
            if count("runs") == 1:
                break_the_broker()
                await asyncio.sleep(30)  # cut at 1 s
            await asyncio.sleep(0.7)  # 0.7 s of the second run's own 1 s

        async def test_hangs_each_time(stack):
            break_the_broker()
            await asyncio.sleep(30)
        """
    )
    result = inner.runpytest_subprocess(
        "-p", "tests.guard", "-p", "no:cacheprovider", "-rA", timeout=120
    )
    out = result.stdout.str()
    assert "INTERNALERROR" not in out, out
    result.assert_outcomes(passed=1, failed=1)
    assert (inner.path / "runs").read_text().count("x") == 2
    assert "test_hangs_each_time: health check answered HTTP 500" in out
    assert "failed again" in out


def test_tests_without_the_stack_are_not_watched(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_it="""
        from conftest import break_the_broker

        def test_unit():
            break_the_broker()
            assert False
        """
    )
    result = _run(inner)
    result.assert_outcomes(failed=1)
    assert not (inner.path / "heals").exists()


# -- the health check ----------------------------------------------------------------


async def test_the_stack_broker_answers_its_health_check(stack: StackInfo) -> None:
    assert broker_unhealthy(stack.pulsar_admin_url) is None


class _Answer(http.server.BaseHTTPRequestHandler):
    status = 200
    body = b"ok"
    delay = 0.0

    def do_GET(self) -> None:
        time.sleep(self.delay)
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[type[_Answer]]:
    handler = type("Answer", (_Answer,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_broker_answering_ok_is_healthy(serve: type[_Answer]) -> None:
    assert broker_unhealthy(serve.url) is None  # type: ignore[attr-defined]


def test_a_broker_answering_an_error_is_not(serve: type[_Answer]) -> None:
    serve.status = 500
    serve.body = b"timed out writing the heartbeat"
    why = broker_unhealthy(serve.url)  # type: ignore[attr-defined]
    assert why == "health check answered HTTP 500"


def test_a_broker_answering_something_else_is_not(serve: type[_Answer]) -> None:
    serve.body = b"starting"
    assert broker_unhealthy(serve.url) == "health check answered 'starting'"  # type: ignore[attr-defined]


def test_a_broker_that_does_not_answer_in_time_is_not(serve: type[_Answer]) -> None:
    serve.delay = 2.0
    began = time.monotonic()
    why = broker_unhealthy(serve.url, timeout=0.5)  # type: ignore[attr-defined]
    assert why is not None and "timed out" in why
    assert time.monotonic() - began < 1.5


def test_a_broker_that_is_not_there_is_not(serve: type[_Answer]) -> None:
    url = serve.url  # type: ignore[attr-defined]
    assert broker_unhealthy(url.rsplit(":", 1)[0] + ":1") is not None
