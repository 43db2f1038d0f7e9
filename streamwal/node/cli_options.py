"""The broker options of the commands that read a channel straight from Pulsar
(``channel status``, ``verify``): a node's file (``--config``, ``--set``: its
``pulsar:`` section through the node's one loader, environment included), each part of
it overridden by the flag that names it, or the flags alone.

An operator who runs the nodes from a file should not retype its broker, tenant and
namespace (and get one of them wrong) to inspect a channel: the ``cluster`` commands
read the same file. The loader is imported only when a file or ``--set`` is given:
``verify`` runs without the ``node`` extra (YAML comes with it).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.defaults import PULSAR_SERVICE_URL
from streamwal.errors import ConfigError

__all__ = ["add_channel_command", "add_file_options", "add_pulsar_options", "pulsar_from_args"]


def add_file_options(parser: argparse.ArgumentParser, file_help: str) -> None:
    """``--config FILE`` and ``--set section.key=value`` (repeatable): a node's settings
    as the node's one loader reads them, so every command spells them the same way."""
    parser.add_argument("--config", type=Path, help=file_help)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a setting over the file and the environment (repeatable; lists comma "
        "separated; e.g. --set node.id=2)",
    )


def add_pulsar_options(parser: argparse.ArgumentParser) -> None:
    add_file_options(
        parser,
        "a node's file: its pulsar section (broker, admin URL, tenant, namespace, token, "
        "TLS); the flags below override it",
    )
    parser.add_argument(
        "--pulsar",
        help="broker URL (default: the file's, else $STREAMWAL_PULSAR_SERVICE_URL, else "
        f"{PULSAR_SERVICE_URL})",
    )
    parser.add_argument(
        "--admin",
        help="the broker's admin URL (default: the file's, else derived from the broker URL "
        "for standard ports)",
    )
    parser.add_argument("--tenant", help="default: the file's, else public")
    parser.add_argument("--namespace", help="default: the file's, else default")


def add_channel_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str
) -> argparse.ArgumentParser:
    """A ``channel`` command on one pchannel read straight from its broker (``status``,
    ``delete``): the channel, then the broker options, in the same order in each."""
    parser = commands.add_parser(name, help=help)
    parser.add_argument("name", help="the pchannel")
    add_pulsar_options(parser)
    return parser


def pulsar_from_args(args: argparse.Namespace) -> PulsarConfig:
    """The broker to read: :class:`~streamwal.errors.ConfigError` for a file that does
    not load (its exit code is 2, as for any configuration error). The client logs
    through Python logging, as every command's does, not to a node's log file."""
    base = PulsarConfig()
    overrides = getattr(args, "overrides", None) or ()
    if args.config is not None or overrides:
        try:
            from streamwal.node.config import load_config
        except ModuleNotFoundError as exc:  # YAML comes with the node extra
            raise ConfigError(
                "--config",
                f"reading a node's file needs the 'node' extra (module {exc.name!r} is not "
                "installed): pip install 'streamwal[node]'",
            ) from None
        base = load_config(args.config, overrides=overrides).pulsar
    if args.pulsar and not args.admin:  # the file's admin API is its own broker's
        base = dataclasses.replace(base, admin_url=None)
    given = {
        "service_url": args.pulsar,
        "admin_url": args.admin,
        "tenant": args.tenant,
        "namespace": args.namespace,
    }
    explicit = {k: v for k, v in given.items() if v is not None}
    return dataclasses.replace(base, client_log_file=None, **explicit)
