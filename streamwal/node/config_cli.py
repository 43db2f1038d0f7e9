"""``streamwal config show``: every setting of a node, with its default, type,
environment variables and description, and what a file, the environment and flags
make of it.

Its options to find a configuration (``--config``, ``--set``) are those of
``streamwal serve`` (:func:`add_source_arguments`), read by the same loader, so what
it shows is what ``serve`` would run with.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from streamwal.node.cli_options import add_file_options
from streamwal.node.config import ConfigError, NodeConfig, load_config
from streamwal.node.settings_table import FORMATS, render, settings

__all__ = ["add_source_arguments", "config_from_args", "register"]


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` and ``--set section.key=value`` (repeatable)."""
    add_file_options(
        parser,
        "node.yaml (default: none; Pulsar's and etcd's standard local endpoints, or the "
        "ones $STREAMWAL_PULSAR_SERVICE_URL and $STREAMWAL_ETCD_ENDPOINTS name)",
    )


def config_from_args(args: argparse.Namespace) -> NodeConfig:
    """The configuration :func:`add_source_arguments`' options name."""
    return load_config(args.config, overrides=getattr(args, "overrides", ()))


def register(sub: Any) -> None:
    config = sub.add_parser("config", help="a node's settings: every key, its default and value")
    verbs = config.add_subparsers(dest="verb", metavar="VERB", required=True)
    show = verbs.add_parser(
        "show", help="every setting with its default, type, environment variables and meaning"
    )
    add_source_arguments(show)
    show.add_argument(
        "--defaults",
        action="store_true",
        help="the defaults only (what an empty environment gives), not this configuration",
    )
    show.add_argument("--format", choices=FORMATS, default="table", help="default: %(default)s")
    show.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    if args.defaults:
        rows = settings()
    else:
        try:
            rows = settings(config_from_args(args))
        except ConfigError as exc:
            print(f"invalid configuration: {exc}", file=sys.stderr)
            return 2
    sys.stdout.write(render(rows, args.format, values=not args.defaults))
    return 0
