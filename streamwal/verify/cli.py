"""``streamwal verify``: check a channel's whole log with a plain Pulsar reader.

Exit codes: 0 when the log holds no violation, 1 when it does (the summary names the
first offending message ids), 2 when the log, the acknowledgements or the node's file
(``--config``, which names the broker) could not be read, 3 when the channel does not
exist (checked on the admin API; nothing is created). docs/cli.md has every command's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pulsar
from pulsar import asyncio as pulsar_asyncio

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId
from streamwal.adaptors.pulsar.admin import PulsarAdmin, admin_url_for, require_topic
from streamwal.adaptors.pulsar.opener import client_logger
from streamwal.adaptors.pulsar.retention import TopicRetention
from streamwal.adaptors.pulsar.scanner import to_backend_message
from streamwal.errors import NoSuchChannelError, StreamwalError
from streamwal.node.cli_options import add_pulsar_options, pulsar_from_args
from streamwal.timeouts import within
from streamwal.verify.acks import Ack, Failure, TxnRecord, read_acks
from streamwal.verify.history import HistoryReport, check_history
from streamwal.wal.backend import BackendMessage, validate_channel_name
from streamwal.wal.chunking import reassemble

__all__ = ["read_delivered", "read_topic", "register", "verify_channel"]


def register(sub: Any) -> None:
    verify = sub.add_parser(
        "verify", help="check a channel's log: time ticks, owners, acknowledgements, transactions"
    )
    verify.add_argument("--channel", required=True, help="the pchannel to check")
    verify.add_argument("--acks", type=Path, help="a file of acknowledgements a client recorded")
    verify.add_argument(
        "--delivered",
        type=Path,
        help="a file of the message ids (hex, one a line) a reader of the whole channel "
        "delivered: checks no transaction was delivered uncommitted or in part",
    )
    add_pulsar_options(verify)  # the admin URL: to read the truncation point
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(func=_run)


async def read_topic(service_url: str, topic: str, timeout: float = 30.0) -> list[BackendMessage]:
    """Every entry of ``topic`` up to its end when the read started."""
    client = pulsar_asyncio.Client(
        service_url, operation_timeout_seconds=int(timeout), logger=client_logger()
    )
    try:
        reader = await client.create_reader(topic, pulsar.MessageId.earliest)
        entries = []
        while await within(reader.has_message_available(), timeout):
            entries.append(to_backend_message(await within(reader.read_next(), timeout)))
        await reader.close()
        return entries
    finally:
        await client.close()


async def verify_channel(
    service_url: str,
    channel: str,
    acks_file: Path | None = None,
    *,
    acks: Iterable[Ack] = (),
    failures: Iterable[Failure] = (),
    tenant: str = "public",
    namespace: str = "default",
    admin_url: str | None = None,
    delivered: Iterable[bytes] | None = None,
    batches: Iterable[Sequence[str]] = (),
    txns: Iterable[TxnRecord] = (),
    must_exist: bool = False,
) -> HistoryReport:
    """Check ``channel``'s whole log against the acknowledgements of ``acks_file`` and
    ``acks``, and the failed appends ``failures``; ``delivered``: the message ids a
    reader of the whole channel delivered (transaction rules); ``batches``: each batch
    a client sent, as its payloads' digests in order (the ``batch-split`` rule);
    ``txns``: what clients were told of their transactions.

    With an admin API (``admin_url``, or derived from ``service_url``), a truncated
    channel is checked from its truncation point, and with ``must_exist`` a channel
    without a topic raises :class:`NoSuchChannelError` (the reader would create it).
    """
    validate_channel_name(channel)
    config = PulsarConfig(service_url=service_url, tenant=tenant, namespace=namespace)
    topic = config.topic(channel)
    admin = admin_url or admin_url_for(service_url)
    truncated = None
    if admin is not None:
        if must_exist:
            await require_topic(PulsarAdmin(admin), topic, channel)
        retention = TopicRetention(PulsarAdmin(admin), topic, channel, config.cursor_subscription)
        truncated = await retention.truncation_point()
    # chunked messages whole (CorruptedChunkError if one cannot be rebuilt)
    entries = list(reassemble(channel, await read_topic(service_url, topic)))
    recorded = list(read_acks(acks_file)) if acks_file else []
    recorded.extend(acks)
    return check_history(
        entries,
        PulsarMessageId.from_bytes,
        recorded,
        failures,
        truncated_before=truncated,
        delivered=delivered,
        batches=batches,
        txns=txns,
    )


def read_delivered(path: Path) -> list[bytes]:
    """Message ids, hex, one a line (blank lines skipped)."""
    with open(path) as lines:
        return [bytes.fromhex(line.strip()) for line in lines if line.strip()]


def _run(args: argparse.Namespace) -> int:
    try:
        config = pulsar_from_args(args)
        report = asyncio.run(
            verify_channel(
                config.service_url,
                args.channel,
                args.acks,
                tenant=config.tenant,
                namespace=config.namespace,
                admin_url=config.admin_url,
                delivered=read_delivered(args.delivered) if args.delivered else None,
                must_exist=True,
            )
        )
    except NoSuchChannelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except (StreamwalError, OSError, TimeoutError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"channel": args.channel, **report.as_dict()}, indent=2))
        return 0 if report.ok else 1
    print(f"channel {args.channel}")
    print(report.summary())
    print("OK" if report.ok else "VIOLATIONS FOUND")
    return 0 if report.ok else 1
