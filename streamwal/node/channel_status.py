"""``streamwal channel status NAME``: a channel's truncation point, storage, consumers
and term.

Read from the broker (the admin API and a plain reader), not from a node, so it works on
a channel nobody owns, from any shell that reaches the broker; ``--config`` takes the
broker from a node's file. The term is read from etcd, where the nodes of that file keep
it (:mod:`streamwal.node.terms`; a cluster's under its own prefix); etcd not answering
leaves it unknown, not the status failed. Exit codes (docs/cli.md): 0, 2 when the broker
or its admin API cannot be read or the file is not a valid configuration, 3 when the
channel does not exist (asked of the admin API first: a reader would create the topic).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from typing import Any

import pulsar

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.adaptors.pulsar.admin import require_topic
from streamwal.adaptors.pulsar.scanner import to_backend_message
from streamwal.errors import DecodeError, NoSuchChannelError, StreamwalError
from streamwal.node.channel_assign import add_assign
from streamwal.node.channel_delete import add_delete_parser
from streamwal.node.cli_options import add_channel_command, pulsar_from_args
from streamwal.node.config import NodeConfig
from streamwal.node.config_cli import config_from_args
from streamwal.node.terms import ChannelTerm, EtcdTerms
from streamwal.timeouts import within
from streamwal.tso.timestamp import physical_datetime
from streamwal.wal.initializing import open_read_only
from streamwal.wal.message import decode_entry
from streamwal.wal.retention_contract import time_tick_lag_ms

__all__ = ["channel_status", "register", "terms_of"]


def register(sub: Any) -> None:
    channel = sub.add_parser("channel", help="inspect or delete a channel on the broker")
    commands = channel.add_subparsers(dest="channel_command", required=True)
    status = add_channel_command(
        commands, "status", "truncation point, storage used, consumers' checkpoints and lag"
    )
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=_run)
    add_delete_parser(commands)
    add_assign(commands)


async def channel_status(
    config: PulsarConfig, channel: str, terms: EtcdTerms | None = None
) -> dict[str, Any]:
    """What ``status`` prints, as data; the term from ``terms`` (``None``: unknown)."""
    async with PulsarOpener(config) as opener:
        if opener.admin is not None:
            await require_topic(opener.admin, config.topic(channel), channel)
        reader = await open_read_only(opener, channel)
        try:
            state = await reader.retention()
        finally:
            await reader.close()
        latest = await _latest_time_tick(opener.client, config.topic(channel))
    term = await _term(terms, channel)
    point = state.truncated_before
    return {
        "channel": channel,
        "topic": config.topic(channel),
        "term": None if term is None else term.term,
        "term_node": None if term is None else term.node,
        "truncated_before": str(point) if point is not None else None,
        "truncated_through": (
            str(state.truncated_through) if state.truncated_through is not None else None
        ),
        "storage_bytes": state.storage_bytes,
        "latest_time_tick": latest,
        "consumers": [
            {
                "consumer": c.checkpoint.consumer,
                "checkpoint": str(c.checkpoint.message_id),
                "time_tick": c.checkpoint.time_tick,
                "backlog_messages": c.backlog_messages,
                "backlog_bytes": c.backlog_bytes,
                "time_tick_lag_ms": (
                    time_tick_lag_ms(latest, c.checkpoint.time_tick) if latest else None
                ),
            }
            for c in state.consumers
        ],
    }


async def _term(terms: EtcdTerms | None, channel: str) -> ChannelTerm | None:
    """The channel's term; ``None`` when it has none or etcd did not answer."""
    if terms is None:
        return None
    try:
        async with terms:
            return await terms.read(channel)
    except StreamwalError:
        return None


def terms_of(config: NodeConfig) -> EtcdTerms:
    """Where the nodes of ``config`` keep channels' terms: a cluster's under its prefix,
    a standalone node's under ``tso.key_prefix``."""
    if config.cluster.enabled:
        return EtcdTerms(config.etcd, f"{config.cluster.key_prefix}/cluster", timeout_s=2.0)
    return EtcdTerms(config.etcd, config.tso.key_prefix, timeout_s=2.0)


async def _latest_time_tick(client: Any, topic: str) -> int | None:
    """The time tick of the log's last streamwal message, if there is one."""
    reader = await client.create_reader(
        topic, pulsar.MessageId.latest, start_message_id_inclusive=True
    )
    try:
        if not await within(reader.has_message_available(), 10):
            return None
        raw = to_backend_message(await within(reader.read_next(), 10))
        try:
            return decode_entry(raw, PulsarMessageId.from_bytes)[-1].time_tick
        except DecodeError:
            return None
    finally:
        await reader.close()


def _size(n: int | None) -> str:
    if n is None or n < 0:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _when(time_tick: int) -> str:
    return physical_datetime(time_tick).strftime("%Y-%m-%d %H:%M:%S UTC")


def _truncation_line(before: str | None, through: str | None) -> str:
    if through is None:
        return "  truncated before: " + (before or "never truncated")
    if before is None:
        return f"  truncated through: {through} (inclusive)"
    return f"  truncated before: {before}; through {through} (inclusive)"


def render(status: dict[str, Any]) -> str:
    latest = status["latest_time_tick"]
    lines = [
        f"channel {status['channel']} ({status['topic']}), "
        + (
            f"term {status['term']} (node {status['term_node']})"
            if status.get("term") is not None
            else "term unknown (none given, or etcd not reached)"
        ),
        _truncation_line(status["truncated_before"], status.get("truncated_through")),
        f"  storage: {_size(status['storage_bytes'])}",
        "  latest time tick: "
        + (f"{latest} ({_when(latest)})" if latest else "none (no streamwal message)"),
    ]
    if not status["consumers"]:
        lines.append("  consumers: none registered")
    else:
        lines.append("  consumers:")
        for c in status["consumers"]:
            lag = c["time_tick_lag_ms"]
            backlog = c["backlog_messages"]
            lines.append(
                f"    {c['consumer']}: checkpoint {c['checkpoint']} at {c['time_tick']}, "
                f"backlog {backlog if backlog is not None else 'unknown'} messages / "
                f"{_size(c['backlog_bytes'])}, "
                + (f"{lag / 1000:.1f} s behind" if lag is not None else "lag unknown")
            )
    return "\n".join(lines)


def _pulsar_config(args: argparse.Namespace) -> PulsarConfig:
    """The node loader's ``pulsar:`` section (file, environment, ``--set``), with the
    flags of this command over it; the client logs through Python logging, as every
    command's does, not to a node's log file."""
    given = {
        "service_url": args.pulsar,
        "admin_url": args.admin,
        "tenant": args.tenant,
        "namespace": args.namespace,
    }
    pulsar = config_from_args(args).pulsar
    if args.pulsar and not args.admin:  # the file's admin API is its own broker's
        pulsar = dataclasses.replace(pulsar, admin_url=None)
    explicit = {k: v for k, v in given.items() if v is not None}
    return dataclasses.replace(pulsar, client_log_file=None, **explicit)


def _run(args: argparse.Namespace) -> int:
    try:
        config = pulsar_from_args(args)
        status = asyncio.run(channel_status(config, args.name, terms_of(config_from_args(args))))
    except NoSuchChannelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except (StreamwalError, OSError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(status, indent=2) if args.json else render(status))
    return 0
