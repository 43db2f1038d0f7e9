"""The broker options of the commands that read a channel straight from Pulsar
(``channel status``, ``verify``): a node's file (``--config``, its ``pulsar:``
section), each part of it overridden by the flag that names it, or the flags alone.

An operator who runs the nodes from a file should not retype its broker, tenant and
namespace (and get one of them wrong) to inspect a channel: the ``cluster`` commands
read the same file.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.errors import ConfigError

__all__ = ["add_pulsar_options", "pulsar_from_args"]


def add_pulsar_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        help="a node's file: its pulsar section (broker, admin URL, tenant, namespace); "
        "the flags below override it",
    )
    parser.add_argument(
        "--pulsar", help=f"broker URL (default: the file's, else {PulsarConfig().service_url})"
    )
    parser.add_argument(
        "--admin",
        help="the broker's admin URL (default: the file's, else derived from the broker URL "
        "for standard ports)",
    )
    parser.add_argument("--tenant", help="default: the file's, else public")
    parser.add_argument("--namespace", help="default: the file's, else default")


def pulsar_from_args(args: argparse.Namespace) -> PulsarConfig:
    """The broker to read: :class:`~streamwal.errors.ConfigError` for a file that does
    not load (its exit code is 2, as for any configuration error)."""
    base = PulsarConfig()
    if args.config is not None:
        try:
            from streamwal.node.config import load_config
        except ModuleNotFoundError as exc:  # YAML comes with the node extra
            raise ConfigError(
                "--config",
                f"reading a node's file needs the 'node' extra (module {exc.name!r} is not "
                "installed): pip install 'streamwal[node]'",
            ) from None
        base = load_config(args.config).pulsar
    given = {
        "service_url": args.pulsar,
        "admin_url": args.admin,
        "tenant": args.tenant,
        "namespace": args.namespace,
    }
    return dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
