"""``streamwal chaos``: rerun the fault scenarios on the local stack and report.

Prints one table row per scenario (rounds, faults injected, acknowledgements checked,
violations, problems), writes the results as JSON and as a Markdown table into the
work folder, and with ``--doc`` replaces the table between the markers
``<!-- chaos-table:begin -->`` and ``<!-- chaos-table:end -->`` of a document
(``docs/reliability.md``). Exit code 0 when every scenario passed, 1 otherwise, 2 when
the stack could not be started. The scenarios' node logs are kept for failed
scenarios (or all with ``--keep``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from streamwal_lab.chaos.auth import enable_auth
from streamwal_lab.chaos.result import ScenarioResult, failures_table, markdown_table, text_table
from streamwal_lab.chaos.runner import run_scenarios
from streamwal_lab.chaos.scenarios import SCENARIOS
from streamwal_lab.chaos.services import PrivateEtcd, PrivatePulsar
from streamwal_lab.stack import Stack
from streamwal_lab.stack.ports import export_environment
from streamwal_lab.stack.stack import StackError

__all__ = ["BEGIN", "END", "register", "update_doc"]

BEGIN = "<!-- chaos-table:begin -->"
END = "<!-- chaos-table:end -->"


def register(sub: Any) -> None:
    chaos = sub.add_parser(
        "chaos", help="rerun the fault scenarios on the local stack and check every log"
    )
    chaos.add_argument(
        "--scenario",
        action="append",
        choices=sorted(SCENARIOS),
        help="run only this scenario (repeatable; default: all)",
    )
    chaos.add_argument("--rounds", type=int, help="rounds per scenario (default: each one's)")
    chaos.add_argument(
        "--quick", action="store_true", help="the smaller round counts of the default test run"
    )
    chaos.add_argument("--seed", type=int, help="seed of the random choices (default: random)")
    chaos.add_argument("--json", action="store_true", help="print the results as JSON")
    chaos.add_argument("--workdir", type=Path, help="where node logs and results go")
    chaos.add_argument("--keep", action="store_true", help="keep the logs of passed scenarios")
    chaos.add_argument("--doc", type=Path, help="update the results table in this document")
    chaos.add_argument(
        "--private-stack",
        action="store_true",
        help="run on a broker and an etcd of this run (not the shared local stack)",
    )
    chaos.add_argument(
        "--auth",
        action="store_true",
        help="run every node with auth.enabled (its clients and peers send a token)",
    )
    chaos.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    export_environment()  # what it starts defaults to the stack's ports
    if args.rounds is not None and args.rounds < 1:
        print("error: --rounds must be at least 1", file=sys.stderr)
        return 2
    # the scenarios narrate; node processes keep their own logs
    logging.getLogger().setLevel(logging.WARNING)
    for noisy in ("streamwal", "pulsar"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    names = args.scenario or list(SCENARIOS)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="streamwal-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say = _say if not args.json else _say_stderr
    started = time.monotonic()
    try:
        results = asyncio.run(_main(args, names, seed, workdir, say))
    except StackError as exc:
        print(f"error: the local stack is not available: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - started
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    footer = (
        f"Run of {stamp}, seed {seed}, {elapsed / 60:.1f} minutes: "
        f"`streamwal chaos --seed {seed}"
        + (f" --rounds {args.rounds}" if args.rounds else "")
        + (" --quick" if args.quick else "")
        + (" --private-stack" if args.private_stack else "")
        + (" --auth" if args.auth else "")
        + "`."
    )
    (workdir / "chaos-results.json").write_text(
        json.dumps([r.as_dict() for r in results], indent=2, default=str)
    )
    (workdir / "chaos-table.md").write_text(
        f"{markdown_table(results)}\n\n{failures_table(results)}\n\n{footer}\n"
    )
    if args.doc is not None:
        update_doc(args.doc, results, footer)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2, default=str))
    else:
        print()
        print(text_table(results))
        print()
        print(text_table(results, failures=True))
        print(footer)
        print(f"results and logs in {workdir}")
    return 0 if all(r.ok for r in results) else 1


async def _main(
    args: argparse.Namespace, names: list[str], seed: int, workdir: Path, say: Any
) -> list[ScenarioResult]:
    info = await Stack().up(["etcd", "pulsar"])  # installs what a private stack needs too
    pulsar: PrivatePulsar | None = None
    etcd: PrivateEtcd | None = None
    try:
        pulsar_url, etcd_endpoint = info.pulsar_url, info.etcd_endpoint
        if args.private_stack:
            pulsar, etcd = PrivatePulsar(progress=say), PrivateEtcd(workdir / "etcd-data")
            await pulsar.start()
            await etcd.start()
            pulsar_url, etcd_endpoint = pulsar.url, etcd.endpoint
        return await run_scenarios(
            names,
            rounds=args.rounds,
            quick=args.quick,
            pulsar_url=pulsar_url,
            etcd_endpoint=etcd_endpoint,
            workdir=workdir,
            seed=seed,
            say=say,
            keep=args.keep,
            pulsar_admin_url=None if args.private_stack else info.pulsar_admin_url,
            auth_token_file=enable_auth(workdir) if args.auth else None,
            admin_url=pulsar.admin_url if pulsar is not None else info.pulsar_admin_url,
        )
    finally:
        if etcd is not None:
            await etcd.close()
        if pulsar is not None:
            await pulsar.close()


def update_doc(path: Path, results: list[ScenarioResult], footer: str) -> None:
    """Replace the text between the table markers of ``path`` (which must have them)."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{path} has no {BEGIN} ... {END} section")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    tables = f"{markdown_table(results)}\n\n{failures_table(results)}"
    block = f"{BEGIN}\n{tables}\n\n{footer}\n{END}"
    path.write_text(head + block + tail)


def _say(text: str) -> None:
    print(text, flush=True)


def _say_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
