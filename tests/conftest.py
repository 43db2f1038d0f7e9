"""Session-wide fixtures: one local stack (reused if already up) for every test.

Integration tests ask for ``stack`` (Pulsar + etcd) or ``telemetry_stack`` (also the
collector and Jaeger). Each test names its topics and keys uniquely, so tests never
see each other's data and the stack never needs wiping; the topics a session created
are deleted when it ends (:mod:`streamwal_lab.stack.topics` says why).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal_lab.chaos.services import PrivatePulsar
from streamwal_lab.stack import Stack, StackInfo
from streamwal_lab.stack.ports import environment as stack_environment
from streamwal_lab.stack.topics import SharedCleanup, delete_created, list_topics
from tests.etcd_keys import EtcdPrefixes

# memory and time bounds per test, children killed, the resources summary (issue 26);
# the cluster profile, for the modules whose tests need several brokers; the shared
# broker restarted (and the test run again) when a test failed on it broken; the groups
# that keep tests correct on two workers (./dev test runs pytest-xdist)
pytest_plugins = ["tests.guard", "tests.cluster_profile", "tests.stack_watch", "tests.parallel"]

# The product's defaults are the standard local ports; the suite's services are the
# lab's stack. Set before any test module is imported, so every default config built
# here, and every process a test starts, reaches the stack (streamwal.environment).
os.environ.update(stack_environment())

# Hypothesis builds its Unicode tables the first time a text strategy is drawn from,
# and caches them under .hypothesis/: on a fresh clone that took about 230 MB and a
# second inside whichever test came first (over two minutes and +178 MB there once the
# guard's tracemalloc was on). A child process builds the cache before any test runs.
_WARM_HYPOTHESIS = (
    "import warnings; from hypothesis import strategies as st; "
    "warnings.simplefilter('ignore'); st.text(max_size=1).example()"
)


#: an xdist run's registration with the stack's shared cleanup (its controller's)
_CLEANUP = pytest.StashKey["SharedCleanup"]()


def is_worker() -> bool:
    """True in an xdist worker (``tests.parallel`` is imported as a plugin, after this
    module: importing it here first would keep pytest from rewriting its asserts)."""
    from tests.parallel import is_worker as in_worker

    return in_worker()


def _xdist_controller(config: pytest.Config) -> bool:
    """True in the process that hands tests to xdist workers and runs none itself."""
    return not is_worker() and bool(getattr(config.option, "numprocesses", None))


def pytest_sessionstart(session: pytest.Session) -> None:
    if is_worker():
        return  # the controller warmed the cache before starting the workers
    subprocess.run(
        [sys.executable, "-c", _WARM_HYPOTHESIS],
        cwd=session.config.rootpath,
        check=False,
        capture_output=True,
        timeout=120,
    )
    if _xdist_controller(session.config) and not os.environ.get("STREAMWAL_TEST_KEEP_TOPICS"):
        stack = Stack()
        info = asyncio.run(stack.up(["etcd", "pulsar"]))
        cleanup = _cleanup(stack)
        cleanup.enter(asyncio.run(list_topics(info.pulsar_admin_url)))
        session.config.stash[_CLEANUP] = cleanup


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist run's topics go once every worker is done (a worker's session ending
    must not delete the topics the other one is still writing)."""
    cleanup = session.config.stash.get(_CLEANUP, None)
    if cleanup is not None:
        asyncio.run(_leave(Stack().info().pulsar_admin_url, cleanup))


def _cleanup(stack: Stack) -> SharedCleanup:
    """The runs of this suite on one stack clean up together (another run's topics are
    not this one's to delete while it goes on)."""
    return SharedCleanup(stack.paths.stack / "test-runs")


async def _leave(admin_url: str, cleanup: SharedCleanup) -> None:
    before = cleanup.leave()
    if before is None:
        print("\nstack: another test run on this stack deletes the topics", file=sys.stderr)
        return
    try:
        deleted, created = await delete_created(admin_url, before)
    except (OSError, RuntimeError) as exc:  # the broker is gone: nothing to tidy now
        print(f"\nstack: could not delete this session's topics: {exc}", file=sys.stderr)
        return
    print(
        f"\nstack: deleted {deleted} of the {created} topics this session created", file=sys.stderr
    )


@pytest.fixture(scope="session")
def local_stack() -> Stack:
    return Stack()


@pytest.fixture(scope="session")
async def stack(local_stack: Stack) -> AsyncIterator[StackInfo]:
    info = await local_stack.up(["etcd", "pulsar"])
    if os.environ.get("STREAMWAL_TEST_KEEP_TOPICS") or is_worker():
        # kept on purpose, or one part of an xdist run (the controller tidies the run)
        yield info
        return
    cleanup = _cleanup(local_stack)
    cleanup.enter(await list_topics(info.pulsar_admin_url))
    yield info
    await _leave(info.pulsar_admin_url, cleanup)


@pytest.fixture(scope="session")
async def stock(stack: StackInfo) -> AsyncIterator[PrivatePulsar]:
    """A private broker with Pulsar's defaults (the stack installed its jars), one per
    session: the adaptors' tests take namespaces of their own on it, the bookie-disk
    test writes there and the ``stock-broker`` scenario borrows it, instead of each
    paying a JVM's start."""
    broker = PrivatePulsar(stock=True)
    try:
        await broker.start()
        yield broker
    finally:
        await broker.close()


@pytest.fixture(scope="session")
async def telemetry_stack(local_stack: Stack, stack: StackInfo) -> StackInfo:
    missing = [n for n in ("jaeger", "otel-collector") if n not in local_stack.services]
    if missing:
        pytest.fail(f"telemetry services not available in this build: {missing}")
    return await local_stack.up(["jaeger", "otel-collector"])


@pytest.fixture
def unique() -> Iterator[str]:
    """A short unique suffix for channel names and key prefixes."""
    yield uuid.uuid4().hex[:10]


@pytest.fixture
async def channel(
    stack: StackInfo, unique: str, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A fresh channel name (named for the test's folder: ``node-…``, ``verify-…``); its
    topic is deleted after the test, whatever it holds."""
    name = f"{request.path.parent.name}-{unique}"
    yield name
    topic = PulsarAdmin.topic_path(PulsarConfig(service_url=stack.pulsar_url).topic(name))
    await PulsarAdmin(stack.pulsar_admin_url).delete(f"{topic}?force=true")


@pytest.fixture(scope="module")
async def module_etcd_prefix(stack: StackInfo) -> AsyncIterator[Callable[[str], str]]:
    """``etcd_prefix`` for a module's fixtures: nodes that a module's tests share
    (started once, not once per test) take their TSO prefix from it."""
    prefixes = EtcdPrefixes(stack.etcd_endpoint)
    yield prefixes.new
    await prefixes.delete_all()


@pytest.fixture
async def etcd_prefix(stack: StackInfo) -> AsyncIterator[Callable[[str], str]]:
    """``etcd_prefix("name")``: a fresh key prefix in the shared etcd, deleted after the test.

    For ``tso.key_prefix``; see :mod:`tests.etcd_keys`. A fixture that starts nodes on
    these prefixes depends on this one, so pytest stops its nodes before the keys go.
    """
    prefixes = EtcdPrefixes(stack.etcd_endpoint)
    yield prefixes.new
    await prefixes.delete_all()
