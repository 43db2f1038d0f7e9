"""The ``streamwal`` command line.

Each command group lives in its own module and registers itself here through a
``register(subparsers)`` function that sets ``func`` on its parsers; a handler
takes the parsed arguments and returns the process exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from streamwal import __version__

__all__ = ["main"]

# Modules that add sub-commands; each exposes ``register(subparsers)``. The commands
# a module adds, and the extra that installs what it imports, name the command when
# that extra is missing.
_COMMAND_MODULES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("streamwal.node.serve", ("serve",), "node"),
    ("streamwal.tso.cli", ("tso",), "node"),
    ("streamwal.node.channel_status", ("channel",), "node"),
    ("streamwal.cluster.cli", ("cluster",), "node"),
    ("streamwal.tools.stack.cli", ("stack",), "tools"),
    ("streamwal.tools.demo", ("demo",), "tools"),
    ("streamwal.tools.verify", ("verify",), "tools"),
    ("streamwal.tools.bench.cli", ("bench",), "tools"),
    ("streamwal.tools.chaos.cli", ("chaos",), "tools"),
    ("streamwal.node.trace.cli", ("trace",), "tools"),
)


#: commands whose extra is missing: name -> (extra, the module that is not installed)
_MISSING: dict[str, tuple[str, str]] = {}


def _needs_extra(sub: Any, commands: Sequence[str], extra: str, missing: str) -> None:
    """List ``commands`` in the help, marked with the extra that installs them."""
    for name in commands:
        sub.add_parser(name, help=f"(needs: pip install 'streamwal[{extra}]')", add_help=False)
        _MISSING[name] = (extra, missing)


def _missing_extra(argv: Sequence[str]) -> int | None:
    """Explain, instead of a traceback or a usage error, a command whose extra is missing."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in _MISSING:
        return None
    extra, missing = _MISSING[command]
    print(
        f"streamwal {command}: this command needs the '{extra}' extra "
        f"(module {missing!r} is not installed): pip install 'streamwal[{extra}]'",
        file=sys.stderr,
    )
    return 2


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamwal",
        description="A write-ahead-log backend for a streaming node, on Apache Pulsar.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"streamwal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, commands, extra in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command group not built yet
                continue
            if exc.name and exc.name.split(".")[0] != "streamwal":
                _needs_extra(sub, commands, extra, exc.name)
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    missing = _missing_extra(sys.argv[1:] if argv is None else argv)
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


if __name__ == "__main__":
    sys.exit(main())
