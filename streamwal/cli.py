"""The ``streamwal`` command line.

Each command group lives in its own module and registers itself here through a
``register(subparsers)`` function that sets ``func`` on its parsers; a handler
takes the parsed arguments and returns the process exit code.

The product's commands are listed in :data:`_COMMAND_MODULES`. The developer tools
(local stack, demo, benchmarks, chaos runner) are another distribution,
``streamwal-lab``, which the product must not import: it adds its commands through
the :data:`ENTRY_POINT_GROUP` entry points, each naming a module with the same
``register(subparsers)``. Without the lab those commands still show in the help and,
when run, name what to install instead of failing with a usage error.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, NoReturn

from streamwal.version import __version__

__all__ = ["ENTRY_POINT_GROUP", "LAB_COMMANDS", "main", "run"]

#: the entry-point group through which another distribution adds commands
ENTRY_POINT_GROUP = "streamwal.commands"

#: the lab's commands, named here only to say what to install when they are missing
LAB_COMMANDS = ("stack", "demo", "bench", "chaos")

_LAB_HINT = "pip install streamwal-lab (in a checkout of the repository: ./dev)"

# Modules that add sub-commands; each exposes ``register(subparsers)``. The commands
# a module adds, and the extra that installs what it imports (``None``: the core
# install has it all), name the command when that extra is missing.
_COMMAND_MODULES: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("streamwal.server.serve", ("serve",), "node"),
    ("streamwal.node.config_cli", ("config",), "node"),
    ("streamwal.tso.cli", ("tso",), "node"),
    ("streamwal.node.channel_status", ("channel",), "node"),
    ("streamwal.cluster.cli", ("cluster",), "node"),
    ("streamwal.console", ("produce", "consume"), "node"),
    ("streamwal.verify.cli", ("verify",), None),
    ("streamwal.node.trace.cli", ("trace",), None),
)


_PRODUCT_COMMANDS = frozenset(c for _, commands, _ in _COMMAND_MODULES for c in commands)

#: commands that cannot run here: name -> the one line that says what to install
_MISSING: dict[str, str] = {}


def _needs_extra(sub: Any, commands: Sequence[str], extra: str, missing: str) -> None:
    """List ``commands`` in the help, marked with the extra that installs them."""
    for name in commands:
        sub.add_parser(name, help=f"(needs: pip install 'streamwal[{extra}]')", add_help=False)
        _MISSING[name] = (
            f"streamwal {name}: this command needs the '{extra}' extra "
            f"(module {missing!r} is not installed): pip install 'streamwal[{extra}]'"
        )


def _needs_lab(sub: Any, name: str, missing: str | None) -> None:
    """List the lab command ``name`` in the help, marked with what installs it."""
    sub.add_parser(name, help="(needs: pip install streamwal-lab)", add_help=False)
    if missing is None:
        why = "this developer tool comes with the streamwal-lab distribution, not installed"
    else:
        why = f"the streamwal-lab distribution lacks module {missing!r} (install it again)"
    _MISSING[name] = f"streamwal {name}: {why}: {_LAB_HINT}"


def _missing_command(argv: Sequence[str]) -> int | None:
    """Explain, instead of a traceback or a usage error, a command that cannot run here."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in _MISSING:
        return None
    print(_MISSING[command], file=sys.stderr)
    return 2


def _product_commands(sub: Any, only: str | None = None) -> None:
    for name, commands, extra in _COMMAND_MODULES:
        if only is not None and only not in commands:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command group not built yet
                continue
            if extra and exc.name and exc.name.split(".")[0] != "streamwal":
                _needs_extra(sub, commands, extra, exc.name)
                continue
            raise
        module.register(sub)


def _plugin_entry_points() -> list[EntryPoint]:
    """The installed distributions' commands, each name once, in a stable order."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    known = {name: i for i, name in enumerate(LAB_COMMANDS)}  # the lab's in its order
    return [found[n] for n in sorted(found, key=lambda n: (known.get(n, len(known)), n))]


def _plugin_commands(sub: Any) -> None:
    """Register the commands other distributions (the lab) add; name the missing ones."""
    taken = set(sub.choices)
    for ep in _plugin_entry_points():
        if ep.name in taken:  # a plugin never replaces a product command
            continue
        try:
            module = ep.load()
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] == "streamwal":
                raise  # the product itself is broken: show it
            _needs_lab(sub, ep.name, None if exc.name == ep.module.split(".")[0] else exc.name)
            taken.add(ep.name)
            continue
        module.register(sub)
        taken.add(ep.name)
    for name in LAB_COMMANDS:
        if name not in taken:
            _needs_lab(sub, name, None)


def _build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; only ``command``'s when it is one of the product's: a
    command then imports its own module, not all of them (half a second of start-up,
    which an operator's ``streamwal verify`` or a script's short call pays each time)."""
    parser = argparse.ArgumentParser(
        prog="streamwal",
        description="A write-ahead-log backend for a streaming node, on Apache Pulsar.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"streamwal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _MISSING.clear()  # what is missing is decided afresh for each parser
    if command in _PRODUCT_COMMANDS:
        _product_commands(sub, command)
        return parser
    _product_commands(sub)
    _plugin_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    parser = _build_parser(next((a for a in given if not a.startswith("-")), None))
    missing = _missing_command(given)
    if missing is not None:
        return missing
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` or a pager that quit early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141


def run() -> NoReturn:
    """The process's entry: :func:`main`, the exit handlers (OpenTelemetry's flush,
    logging's), then an exit that skips the interpreter's finalization.

    The Pulsar client's native threads may still call into the interpreter while it
    finalizes when the client logs through Python; now and then that aborts the
    process (``terminate called without an active exception``, status -6) after its
    work is done (apache/pulsar-client-python#256), and a caller reads a success as a
    crash. Everything a normal exit would write is written first.
    """
    try:
        code: object = main()
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        code = exc.code
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a reader that went away
                stream.flush()
        os._exit(status)


if __name__ == "__main__":
    run()
