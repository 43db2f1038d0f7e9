"""``streamwal stack up | down | status | clean | env``."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from typing import Any

from streamwal_lab.stack.ports import environment
from streamwal_lab.stack.stack import PROFILES, Stack, StackError, disk_usage, human_bytes

__all__ = ["register"]


def register(sub: Any) -> None:
    stack = sub.add_parser(
        "stack", help="the local service stack (Pulsar, etcd, collector, Jaeger)"
    )
    verbs = stack.add_subparsers(dest="verb", metavar="VERB", required=True)
    up = verbs.add_parser("up", help="install what is missing and start every service")
    up.add_argument("--only", help="comma-separated services to start (default: all)")
    up.set_defaults(func=_up)
    down = verbs.add_parser("down", help="stop the services this stack started")
    down.add_argument("--only", help="comma-separated services to stop (default: all)")
    down.set_defaults(func=_down)
    status = verbs.add_parser("status", help="which services run, on which ports, with which pid")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)
    clean = verbs.add_parser(
        "clean",
        help="stop the services and delete the stack's data (installed jars and builds stay)",
    )
    clean.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    clean.set_defaults(func=_clean)
    env = verbs.add_parser(
        "env",
        help="print the shell exports that point the product's defaults at this stack "
        '(eval "$(streamwal stack env)")',
    )
    env.set_defaults(func=_env)
    for verb in (up, down, status, clean):
        verb.add_argument(
            "--profile",
            choices=PROFILES,
            default="standalone",
            help="standalone: one broker beside etcd and telemetry (default); cluster: "
            "ZooKeeper, 3 bookies, 2 brokers and an admin entry, in a folder of its own",
        )


def _names(args: argparse.Namespace) -> list[str] | None:
    return [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None


def _up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    stack = Stack(profile=args.profile)
    print(f"stack folder: {stack.paths.stack}", file=sys.stderr)
    try:
        if args.profile == "cluster":
            cluster = asyncio.run(stack.up_cluster(_names(args)))
        else:
            info = asyncio.run(stack.up(_names(args)))
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"stack up in {time.monotonic() - started:.1f}s", file=sys.stderr)
    if args.profile == "cluster":
        print(f"  pulsar: {cluster.pulsar_url}")
        print(f"  admin:  {cluster.admin_url} (any broker; brokers redirect to a topic's owner)")
        for broker, url in zip(cluster.broker_ids, cluster.broker_admin_urls, strict=True):
            print(f"  broker {broker}: admin {url}")
        return 0
    print(f"  pulsar: {info.pulsar_url} (admin {info.pulsar_admin_url})")
    print(f"  etcd:   {info.etcd_endpoint}")
    if info.otlp_endpoint:
        print(f"  otlp:   {info.otlp_endpoint}")
    if info.jaeger_url:
        print(f"  jaeger: {info.jaeger_url}")
    return 0


def _env(args: argparse.Namespace) -> int:
    """The stack runs beside a developer's own Pulsar and etcd on the standard ports; a
    shell that should reach the stack instead takes these (``streamwal_lab.stack.ports``)."""
    for name, value in environment().items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = asyncio.run(Stack(profile=args.profile).down(_names(args)))
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _status(args: argparse.Namespace) -> int:
    stack = Stack(profile=args.profile)
    rows = stack.status()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        state = f"running pid {row['pid']}" if row["running"] else "stopped"
        ports = ", ".join(f"{k}={v}" for k, v in dict(row["ports"]).items())  # type: ignore[call-overload]
        disk = human_bytes(int(row["disk"]))  # type: ignore[call-overload]
        extras = "  ".join(
            f"{k}={_shown(v)}"
            for k, v in row.items()
            if k not in {"service", "running", "pid", "ports", "disk"}
        )
        print(f"{row['service']:<15} {state:<18} {ports:<28} disk={disk:<10} {extras}")
    folder = stack.paths.stack
    print(f"stack folder {folder}: {human_bytes(disk_usage(folder))}", file=sys.stderr)
    return 0


def _clean(args: argparse.Namespace) -> int:
    stack = Stack(profile=args.profile)
    folder = stack.paths.stack
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                f"error: `stack clean` deletes all data in {folder}; it asks for confirmation "
                "on a terminal, and there is none: pass --yes",
                file=sys.stderr,
            )
            return 2
        size = human_bytes(disk_usage(folder))
        try:
            answer = input(f"stop the stack and delete its data in {folder} ({size})? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in {"y", "yes"}:
            print("nothing done", file=sys.stderr)
            return 1
    try:
        stopped = asyncio.run(stack.clean())
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    print(f"deleted the data in {folder}")
    return 0


def _shown(value: object) -> object:
    """``yes``/``no`` for a flag, ``unknown`` for a question the server did not answer."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value
