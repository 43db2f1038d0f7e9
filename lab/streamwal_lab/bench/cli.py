"""``streamwal bench [SUITE]``: WAL against the raw client, figures and ratios from one run.

Without a suite every suite runs with its defaults. Services: the local stack
(started if needed) unless ``--pulsar-url`` and ``--etcd`` name others. Each run writes
``bench-<time>[-suite].json`` (machine, versions, every figure, targets) and ``.md``
(the tables) into ``--out``; ``--plot`` adds PNG charts; ``--json`` prints the JSON,
otherwise the Markdown is printed. Progress goes to stderr. Exit code 1 if a suite
failed (the others still run and are reported).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from streamwal_lab.bench import environment, report
from streamwal_lab.bench.suites import SUITES, Suite, default_arguments
from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.bench.targets import evaluate
from streamwal_lab.stack.ports import export_environment

__all__ = ["register"]

_QUIET_LOGGERS = ("streamwal", "pulsar")


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Options valid before or after the suite name; ``suppress`` for the suite's copy."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--out",
        type=Path,
        default=default(Path("bench-results")),
        help="folder for the JSON, Markdown and charts (default bench-results)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print the JSON report instead of the tables",
    )
    parser.add_argument(
        "--plot",
        action="store_true",
        default=default(False),
        help="also write PNG charts (needs matplotlib)",
    )
    parser.add_argument(
        "--pulsar-url",
        default=default(None),
        help="a running broker instead of the local stack (with --etcd)",
    )
    parser.add_argument(
        "--pulsar-admin-url",
        default=default(None),
        help="its admin URL, to record the broker's version",
    )
    parser.add_argument(
        "--etcd",
        default=default(None),
        metavar="HOST:PORT",
        help="a running etcd instead of the local stack",
    )
    parser.add_argument(
        "--profile",
        choices=("standalone", "cluster"),
        default=default("standalone"),
        help="the local stack's broker (default) or its cluster profile: two brokers, "
        "topics on both (etcd from the local stack); the append, open (with "
        "--outage-repeats 0) and takeover suites are measured there",
    )


def register(sub: Any) -> None:
    bench = sub.add_parser(
        "bench",
        help="benchmarks: WAL against the raw client, same run",
        description="Run every suite, or one: " + ", ".join(SUITES) + ".",
    )
    _common(bench, suppress=False)
    bench.set_defaults(func=_handler, suite=None)
    suites = bench.add_subparsers(dest="suite", metavar="SUITE")
    for suite in SUITES.values():
        parser = suites.add_parser(suite.name, help=suite.help)
        suite.add_arguments(parser)
        _common(parser, suppress=True)
        parser.set_defaults(func=_handler)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _target(args: argparse.Namespace) -> BenchTarget:
    if args.profile == "cluster" and (args.pulsar_url or args.etcd):
        raise SystemExit("bench: --profile cluster names the broker: no --pulsar-url or --etcd")
    if args.pulsar_url or args.etcd:
        if not (args.pulsar_url and args.etcd):
            raise SystemExit("bench: --pulsar-url and --etcd go together")
        return BenchTarget(args.pulsar_url, args.etcd, args.pulsar_admin_url, _progress)
    from streamwal_lab.stack import Stack

    if args.profile == "cluster":
        etcd = asyncio.run(Stack().up(["etcd"])).etcd_endpoint
        cluster = asyncio.run(Stack(profile="cluster").up_cluster())
        return BenchTarget(cluster.pulsar_url, etcd, cluster.admin_url, _progress)
    info = asyncio.run(Stack().up(["etcd", "pulsar"]))
    return BenchTarget(
        info.pulsar_url,
        info.etcd_endpoint,
        info.pulsar_admin_url,
        _progress,
        otlp_endpoint=info.otlp_endpoint,
    )


def _topics(target: BenchTarget) -> set[str] | None:
    if target.pulsar_admin_url is None:
        return None
    from streamwal_lab.stack.topics import list_topics

    try:
        return asyncio.run(list_topics(target.pulsar_admin_url))
    except (OSError, RuntimeError) as exc:
        target.progress(f"cannot list topics ({exc}); the bench's topics will stay")
        return None


def _delete_new_topics(target: BenchTarget, before: set[str] | None) -> None:
    """The bench's throw-away topics go (see :mod:`streamwal_lab.stack.topics` for why)."""
    if before is None or target.pulsar_admin_url is None:
        return
    from streamwal_lab.stack.topics import delete_created

    try:
        deleted, created = asyncio.run(
            delete_created(target.pulsar_admin_url, before, lambda t: "/bench-" in t)
        )
    except (OSError, RuntimeError) as exc:
        target.progress(f"cannot delete the bench's topics ({exc})")
        return
    target.progress(f"deleted {deleted} of the {created} topics the bench created")


def _run_suite(target: BenchTarget, suite: Suite, options: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    target.progress(f"== {suite.name}")
    try:
        result = asyncio.run(suite.run(target, options))
    except Exception as exc:  # one failed suite must not cost the others' figures
        target.progress(f"{suite.name} failed: {exc!r}")
        return {"error": repr(exc)}
    result["suite_seconds"] = round(time.perf_counter() - started, 1)
    target.progress(f"{suite.name}: {result['suite_seconds']} s")
    return result


def _handler(args: argparse.Namespace) -> int:
    export_environment()  # what it starts defaults to the stack's ports
    if getattr(args, "verbose", False):
        return _run(args)
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:  # opens log at INFO, takeovers (fences) at WARNING: hundreds
        logger.setLevel(logging.ERROR)
    try:
        return _run(args)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    target = _target(args)
    chosen = [SUITES[args.suite]] if args.suite else list(SUITES.values())
    now = datetime.datetime.now(datetime.UTC)
    machine = environment.machine()  # the load average before the run, not after
    started = time.perf_counter()
    results: dict[str, Any] = {}
    before = _topics(target)
    try:
        for suite in chosen:
            options = args if args.suite else default_arguments(suite)
            results[suite.name] = _run_suite(target, suite, options)
    finally:
        _delete_new_topics(target, before)
    failed = {name: r for name, r in results.items() if "error" in r}
    ok = {name: r for name, r in results.items() if "error" not in r}
    doc: dict[str, Any] = {
        "started_at": now.isoformat(timespec="seconds"),
        "duration_s": round(time.perf_counter() - started, 1),
        "command": " ".join(["streamwal", *sys.argv[1:]]),
        "machine": machine,
        "versions": environment.versions(target.pulsar_admin_url, target.etcd_endpoint),
        "suites": ok,
        "failed": failed,
        "targets": [t.as_dict() for t in evaluate(ok)],
    }
    stem = "bench-" + now.strftime("%Y%m%d-%H%M%S") + (f"-{args.suite}" if args.suite else "")
    json_path, md_path = report.write(doc, args.out, stem)
    written = [json_path, md_path]
    if args.plot:
        from streamwal_lab.bench.plot import plot

        written += plot(doc, args.out, stem)
    if args.json:
        print(json.dumps(report.clean(doc), sort_keys=True))
    else:
        print(report.markdown(doc))
    for path in written:
        _progress(f"wrote {path}")
    for name, r in failed.items():
        _progress(f"suite {name} failed: {r['error']}")
    return 1 if failed else 0
