"""``streamwal stack up | down | status``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from streamwal.tools.stack.stack import Stack, StackError

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


def _names(args: argparse.Namespace) -> list[str] | None:
    return [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None


def _up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    stack = Stack()
    print(f"stack folder: {stack.paths.stack}", file=sys.stderr)
    try:
        info = asyncio.run(stack.up(_names(args)))
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"stack up in {time.monotonic() - started:.1f}s", file=sys.stderr)
    print(f"  pulsar: {info.pulsar_url} (admin {info.pulsar_admin_url})")
    print(f"  etcd:   {info.etcd_endpoint}")
    if info.otlp_endpoint:
        print(f"  otlp:   {info.otlp_endpoint}")
    if info.jaeger_url:
        print(f"  jaeger: {info.jaeger_url}")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = asyncio.run(Stack().down(_names(args)))
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _status(args: argparse.Namespace) -> int:
    rows = Stack().status()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        state = f"running pid {row['pid']}" if row["running"] else "stopped"
        ports = ", ".join(f"{k}={v}" for k, v in dict(row["ports"]).items())  # type: ignore[call-overload]
        extras = "  ".join(
            f"{k}={_shown(v)}"
            for k, v in row.items()
            if k not in {"service", "running", "pid", "ports"}
        )
        print(f"{row['service']:<15} {state:<18} {ports:<28} {extras}")
    return 0


def _shown(value: object) -> object:
    """``yes``/``no`` for a flag, ``unknown`` for a question the server did not answer."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value
