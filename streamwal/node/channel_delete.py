"""``streamwal channel delete NAME``: delete a channel nobody serves, for good.

Its topic with every subscription (the WAL's cursor and truncation point, each
consumer's checkpoint), through the broker's admin API, and with ``--config`` its term
in the nodes' etcd (:mod:`streamwal.node.terms`), by the same code as a node's
``DeleteChannel`` and ``streamwal cluster channels remove --delete-topics``
(:func:`streamwal.wal.deletion.delete_channel`). A channel of a cluster is deleted
through the cluster (``cluster channels remove --delete-topics``), which also takes
it out of the set and waits until no node serves it.

It cannot be undone: on a terminal it asks first; elsewhere it refuses unless
``--yes``. Exit codes (docs/cli.md): 0 deleted; 1 refused (a producer or reader is
attached: a node serves it; not confirmed) or etcd did not answer; 2 a file that is
not a valid configuration, a cluster's node file, or no admin API; 3 no such channel
(a second delete included: nothing is created to find out).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.errors import (
    ConfigError,
    InvalidInputError,
    MisconfiguredError,
    NoSuchChannelError,
    StreamwalError,
)
from streamwal.exitcodes import FAILED, NOT_FOUND, OK, USAGE
from streamwal.node.cli_options import add_channel_command, pulsar_from_args
from streamwal.node.config_cli import config_from_args
from streamwal.node.confirm import NotConfirmedError, confirm
from streamwal.node.terms import EtcdTerms
from streamwal.wal.deletion import ChannelDeletion, ChannelRecords, delete_channel

__all__ = ["add_delete_parser", "delete_standalone_channel"]


def add_delete_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    delete = add_channel_command(
        commands, "delete", "delete a channel nobody serves: its topic, subscriptions, checkpoints"
    )
    delete.add_argument("--yes", action="store_true", help="do not ask (needed off a terminal)")
    delete.set_defaults(func=_run)


async def delete_standalone_channel(
    config: PulsarConfig, channel: str, terms: EtcdTerms | None = None
) -> ChannelDeletion:
    """Delete ``channel``'s topic and subscriptions on the broker ``config`` names, and
    its term in ``terms`` (the etcd of the nodes that open it), if given."""
    records: list[ChannelRecords] = []
    async with PulsarOpener(config) as opener:
        if terms is None:
            return await delete_channel(opener, channel)
        async with terms:
            records.append(terms)
            return await delete_channel(opener, channel, records)


def _terms(args: argparse.Namespace) -> EtcdTerms | None:
    """With a node's file, the etcd where its nodes keep channels' terms; a cluster's
    channel is deleted through the cluster, which also takes it out of its set."""
    if args.config is None:
        return None
    node = config_from_args(args)
    if node.cluster.enabled:
        raise InvalidInputError(
            f"{args.config} is a cluster's node: delete its channels with 'streamwal cluster "
            "channels remove --delete-topics NAME', which takes them out of the set first"
        )
    return EtcdTerms(node.etcd, node.tso.key_prefix, timeout_s=5.0)


def _run(args: argparse.Namespace) -> int:
    try:
        config = pulsar_from_args(args)
        terms = _terms(args)
        topic = config.topic(args.name)
        confirm(f"delete channel {args.name} (topic {topic}, its subscriptions)", yes=args.yes)
        done = asyncio.run(delete_standalone_channel(config, args.name, terms))
    except NoSuchChannelError as exc:
        print(f"streamwal channel delete: {exc}", file=sys.stderr)
        return NOT_FOUND
    except NotConfirmedError as exc:  # refused, as the cluster's deletions are
        print(f"streamwal channel delete: {exc}", file=sys.stderr)
        return FAILED
    except (ConfigError, MisconfiguredError, InvalidInputError) as exc:
        print(f"streamwal channel delete: {exc}", file=sys.stderr)
        return USAGE
    except StreamwalError as exc:  # in use (ChannelInUseError), not confirmed, unavailable
        print(f"streamwal channel delete: {exc}", file=sys.stderr)
        return FAILED
    subscriptions, keys = done.subscriptions_deleted, done.keys_deleted
    what = (
        f"topic {topic} deleted ({subscriptions} subscriptions)"
        if done.log_deleted
        else (f"topic {topic} already missing")
    )
    print(f"channel {args.name}: {what}" + (f", term forgotten ({keys} key)" if keys else ""))
    return OK
