"""``streamwal channel delete NAME``: delete a channel nobody serves, for good.

Its topic with every subscription (the WAL's cursor and truncation point, each
consumer's checkpoint), through the broker's admin API, by the same code as a node's
``DeleteChannel`` and ``streamwal cluster channels remove --delete-topics``
(:func:`streamwal.wal.deletion.delete_channel`). A channel of a cluster is deleted
through the cluster (``cluster channels remove --delete-topics``), which also takes
it out of the set and waits until no node serves it.

It cannot be undone: on a terminal it asks first; elsewhere it refuses unless
``--yes``. Exit codes (docs/cli.md): 0 deleted; 1 refused (a producer or reader is
attached: a node serves it; not confirmed); 2 a file that is not a valid
configuration, or no admin API; 3 no such channel (a second delete included: nothing
is created to find out).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.errors import (
    ConfigError,
    MisconfiguredError,
    NoSuchChannelError,
    StreamwalError,
)
from streamwal.exitcodes import FAILED, NOT_FOUND, OK, USAGE
from streamwal.node.cli_options import add_pulsar_options, pulsar_from_args
from streamwal.node.confirm import confirm
from streamwal.wal.deletion import ChannelDeletion, delete_channel

__all__ = ["add_delete_parser", "delete_standalone_channel"]


def add_delete_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    delete = commands.add_parser(
        "delete", help="delete a channel nobody serves: its topic, subscriptions, checkpoints"
    )
    delete.add_argument("name", help="the pchannel")
    add_pulsar_options(delete)
    delete.add_argument("--yes", action="store_true", help="do not ask (needed off a terminal)")
    delete.set_defaults(func=_run)


async def delete_standalone_channel(config: PulsarConfig, channel: str) -> ChannelDeletion:
    """Delete ``channel``'s topic and subscriptions on the broker ``config`` names."""
    async with PulsarOpener(config) as opener:
        return await delete_channel(opener, channel)


def _run(args: argparse.Namespace) -> int:
    try:
        config = pulsar_from_args(args)
        topic = config.topic(args.name)
        confirm(f"delete channel {args.name} (topic {topic}, its subscriptions)", yes=args.yes)
        done = asyncio.run(delete_standalone_channel(config, args.name))
    except NoSuchChannelError as exc:
        print(f"streamwal channel delete: {exc}", file=sys.stderr)
        return NOT_FOUND
    except (ConfigError, MisconfiguredError) as exc:
        print(f"streamwal channel delete: {exc}", file=sys.stderr)
        return USAGE
    except StreamwalError as exc:  # in use (ChannelInUseError), not confirmed, unavailable
        print(f"streamwal channel delete: {exc}", file=sys.stderr)
        return FAILED
    subscriptions = done.subscriptions_deleted
    print(f"channel {args.name}: topic {topic} deleted ({subscriptions} subscriptions)")
    return OK
