"""``streamwal channel assign NAME --node HOST:PORT [--term N]``: open a channel on one
standalone node, under a term.

The node's own ``AssignChannel``, for an operator or a script driving nodes without a
cluster (a cluster places its channels itself and refuses it: ``streamwal cluster
move``). Exit codes (docs/cli.md): 0 opened, 1 refused or failed (a stale term, a
fence, the node unavailable), 2 bad input (a term that is not a whole number of 0 or
more, a bad channel name: nothing is sent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from streamwal.errors import InvalidInputError, StreamwalError
from streamwal.exitcodes import FAILED, OK, USAGE
from streamwal.node.client import NodeClient
from streamwal.node.terms import check_term
from streamwal.wal.backend import validate_channel_name

__all__ = ["add_assign", "parse_term"]


def add_assign(commands: Any) -> None:
    """Add ``assign`` to the ``channel`` command's sub-commands."""
    assign = commands.add_parser(
        "assign", help="open a channel on one node (no cluster), under a term"
    )
    assign.add_argument("name", help="the pchannel")
    assign.add_argument("--node", required=True, metavar="HOST:PORT", help="the node's address")
    # taken as text and checked here, so a bad one is the typed error every caller gets
    assign.add_argument(
        "--term",
        metavar="N",
        help="the channel's term for this owner (default: its current term plus one)",
    )
    assign.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    assign.add_argument("--json", action="store_true", help="print the answer as JSON")
    assign.set_defaults(func=_run)


def parse_term(text: str | None) -> int | None:
    """``--term``'s value: :class:`InvalidInputError` unless a whole number of 0 or more."""
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"--term: a term is a whole number of 0 or more, got {text!r}"
        ) from None
    try:
        return check_term(value)
    except InvalidInputError as exc:
        raise InvalidInputError(f"--term: {exc}") from None


async def _assign(node: str, channel: str, term: int | None, timeout: float) -> dict[str, Any]:
    async with NodeClient(node, tracing=False) as client:
        opened = await client.assign(channel, timeout, term=term)
    return {
        "channel": opened.pchannel,
        "node": node,
        "term": opened.term,
        "first_time_tick": opened.first_time_tick,
        "first_message_id": opened.first_message_id_text,
        "attempts": opened.attempts,
    }


def _run(args: argparse.Namespace) -> int:
    try:
        validate_channel_name(args.name)
        term = parse_term(args.term)
    except InvalidInputError as exc:
        print(f"streamwal channel assign: {exc}", file=sys.stderr)
        return USAGE
    try:
        answer = asyncio.run(_assign(args.node, args.name, term, args.timeout))
    except StreamwalError as exc:
        print(f"streamwal channel assign: {exc}", file=sys.stderr)
        return FAILED
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        print(
            f"channel {answer['channel']} open on {answer['node']} under term {answer['term']} "
            f"(first time tick {answer['first_time_tick']} at {answer['first_message_id']})"
        )
    return OK
