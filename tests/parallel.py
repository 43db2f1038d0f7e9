"""Running the suite on two workers (pytest-xdist), and what must stay together.

Why: most of the suite's time is waiting (a broker's round trip, a lease to expire, a
node process to start); one process used about half of one core. ``./dev test`` runs
``-n 2 --dist loadgroup``; this plugin gives each test the group that keeps it correct
there:

- a test whose fixtures live longer than the test (module or class scope: nodes a
  module's tests share) runs in the one worker that holds them: its module's group;
- the cluster profile (several brokers a module starts and stops again) and the stock
  broker (a private JVM, one per session) each have one group, so one worker starts
  them once and no worker stops what another is using;
- the benches and the demos clean up by name patterns of the whole broker (every
  ``bench-`` topic created since their start): one group each, so one never deletes a
  topic the other is writing;
- everything else is spread test by test.

The topics a session created are deleted once, by the controller, after every worker
has finished (``tests/conftest.py``); a worker's own session leaves them.
"""

from __future__ import annotations

import os

import pytest

#: fixtures whose one instance the tests using them must share, by group
_SHARED_FIXTURES = {"pulsar_cluster": "cluster", "stock": "stock"}
#: files that clean up by a broker-wide name pattern, by group
_PATTERN_CLEANERS = {
    "tests/tools/test_bench_": "bench",
    "tests/tools/bench/": "bench",
    "tests/tools/test_demo": "demo",
}
_LONG_SCOPES = {"module", "class", "package"}


def is_worker() -> bool:
    """True in an xdist worker: its session is one part of the run."""
    return "PYTEST_XDIST_WORKER" in os.environ


def group_of(item: pytest.Item) -> str | None:
    """The xdist group ``item`` must run in, or None when it may run anywhere."""
    info = getattr(item, "_fixtureinfo", None)
    names: list[str] = list(info.names_closure) if info is not None else []
    for name in names:
        if name in _SHARED_FIXTURES:
            return _SHARED_FIXTURES[name]
    if item.get_closest_marker("cluster") is not None:
        return "cluster"
    path = item.nodeid.split("::", 1)[0]
    for prefix, group in _PATTERN_CLEANERS.items():
        if path.startswith(prefix):
            return group
    defs = info.name2fixturedefs if info is not None else {}
    if any(d.scope in _LONG_SCOPES for fixturedefs in defs.values() for d in fixturedefs):
        return path
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = group_of(item)
        if group is not None:
            _put_in_group(item, group)


def _put_in_group(item: pytest.Item, group: str) -> None:
    """What ``--dist loadgroup`` reads: the ``xdist_group`` mark, which xdist's own hook
    turns into a ``@group`` suffix of the id it schedules by. From pytest 9 an item's id
    is ``item._id`` and xdist's write to ``item._nodeid`` no longer reaches it (every
    test then runs wherever, and a module's shared nodes start in both workers): the
    suffix is set here. ``tests/test_parallel.py`` runs a grouped module on two workers."""
    item.add_marker(pytest.mark.xdist_group(group))
    if not hasattr(item, "_id") or not getattr(item.config.option, "loadgroup", False):
        # pytest 8: xdist's hook adds the suffix; no loadgroup (one process, as
        # `./dev test <args>` runs): nothing reads it, and the option may not exist
        return
    from _pytest.nodeid import coerce_node_id

    if not item.nodeid.endswith(f"@{group}"):
        item._id = coerce_node_id(f"{item.nodeid}@{group}")
