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

from streamwal import __version__

__all__ = ["main"]

# Modules that add sub-commands; each exposes ``register(subparsers)``.
_COMMAND_MODULES = (
    "streamwal.tools.stack.cli",
    "streamwal.tso.cli",
    "streamwal.tools.demo",
    "streamwal.node.serve",
    "streamwal.tools.verify",
    "streamwal.tools.bench.cli",
    "streamwal.tools.chaos.cli",
    "streamwal.node.trace.cli",
)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamwal",
        description="A write-ahead-log backend for a streaming node, on Apache Pulsar.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"streamwal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command group not built yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
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
