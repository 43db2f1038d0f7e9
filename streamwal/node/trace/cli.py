"""``streamwal trace show TRACE_ID``, ``streamwal trace opens`` and ``streamwal trace
failovers``: traces from a shell.

All read Jaeger's query API (``--jaeger``, else ``$STREAMWAL_JAEGER_URL``, else
``http://127.0.0.1:16686``, where the lab's local stack serves it) and print text for a
person or, with ``--json``, the same data for tools. Exit status 1 with one ``error:``
line when Jaeger does not answer or does not hold the trace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from streamwal.argtypes import count
from streamwal.errors import InvalidInputError, StreamwalError
from streamwal.exitcodes import FAILED, NOT_FOUND, USAGE
from streamwal.node.trace.failovers import recent_failovers, render_failovers
from streamwal.node.trace.jaeger import (
    DEFAULT_JAEGER_URL,
    ENV_JAEGER_URL,
    TraceNotFoundError,
    default_jaeger_url,
    fetch_trace,
)
from streamwal.node.trace.model import trace_view
from streamwal.node.trace.opens import recent_opens, render_opens
from streamwal.node.trace.waterfall import render_waterfall

__all__ = ["parse_since", "register"]


class _Listed(Protocol):
    def to_json(self) -> dict[str, Any]: ...


_Row = TypeVar("_Row", bound=_Listed)

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(text: str) -> float:
    """Seconds in ``90s``, ``15m``, ``1h``, ``2d`` (a bare number is seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a positive duration like 90s, 15m, 1h: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def register(sub: Any) -> None:
    trace = sub.add_parser("trace", help="read traces from Jaeger in the terminal")
    verbs = trace.add_subparsers(dest="verb", metavar="VERB", required=True)
    show = verbs.add_parser(
        "show", help="one trace as a waterfall (span tree, errors, WAL attributes)"
    )
    show.add_argument("trace_id", metavar="TRACE_ID")
    opens = verbs.add_parser("opens", help="recent channel opens, slowest first")
    opens.add_argument("--channel", help="only this channel's opens")
    opens.add_argument(
        "--since", type=parse_since, default=3600.0, help="how far back (90s, 15m, 1h; default 1h)"
    )
    opens.add_argument("--service", action="append", help="only these services (repeatable)")
    opens.add_argument("--limit", type=count, default=20, help="at most this many (default 20)")
    failovers = verbs.add_parser(
        "failovers", help="recent failovers of channels: outage, parts, trace URL"
    )
    failovers.add_argument("--channel", help="only this channel's failovers")
    failovers.add_argument(
        "--since", type=parse_since, default=3600.0, help="how far back (90s, 15m, 1h; default 1h)"
    )
    failovers.add_argument(
        "--limit", type=count, default=20, help="at most this many, newest first (default 20)"
    )
    for parser in (show, opens, failovers):
        parser.add_argument(
            "--jaeger",
            help=f"Jaeger query URL (default: ${ENV_JAEGER_URL}, else {DEFAULT_JAEGER_URL})",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.set_defaults(func=_show)
    opens.set_defaults(func=_opens)
    failovers.set_defaults(func=_failovers)


def _show(args: argparse.Namespace) -> int:
    url = default_jaeger_url(args.jaeger)
    try:
        view = trace_view(asyncio.run(fetch_trace(url, args.trace_id)))
    except StreamwalError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps(view.to_json(), indent=2))
    else:
        print("\n".join(render_waterfall(view)))
    return 0


def _opens(args: argparse.Namespace) -> int:
    search = recent_opens(
        default_jaeger_url(args.jaeger),
        channel=args.channel,
        since_s=args.since,
        services=args.service,
        limit=max(args.limit, 1),
    )
    return _list(args, search, render_opens)


def _failovers(args: argparse.Namespace) -> int:
    search = recent_failovers(
        default_jaeger_url(args.jaeger),
        channel=args.channel,
        since_s=args.since,
        limit=max(args.limit, 1),
    )
    return _list(args, search, render_failovers)


def _list(
    args: argparse.Namespace,
    search: Coroutine[Any, Any, list[_Row]],
    render: Callable[[list[_Row]], list[str]],
) -> int:
    """Print what ``search`` found: a table, or its rows' JSON with ``--json``."""
    try:
        found = asyncio.run(search)
    except StreamwalError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps([row.to_json() for row in found], indent=2))
    else:
        print("\n".join(render(found)))
    return 0


def _fail(exc: StreamwalError) -> int:
    """The exit code of docs/cli.md: 3 for a trace Jaeger does not hold, 2 for an id
    that cannot be one, 1 for a Jaeger that does not answer."""
    print(f"error: {exc}", file=sys.stderr)
    if isinstance(exc, TraceNotFoundError):
        return NOT_FOUND
    if isinstance(exc, InvalidInputError):
        return USAGE
    return FAILED
