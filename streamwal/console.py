"""``streamwal produce`` and ``streamwal consume``: write or read a few messages from a
shell, as an operator on call does with a console producer.

Through the cluster when there is one: ``--etcd`` (and ``--cluster-prefix``), or a
node's file (``--config``) whose ``cluster.enabled`` is true, gives a
:class:`~streamwal.cluster.client.ClusterClient`, which finds and follows the owner;
``--node HOST:PORT``, or a node's file without a cluster, a
:class:`~streamwal.node.client.NodeClient` on that node. Nothing is ever created to
answer: a channel that does not exist (not in the cluster's set, not open on the node
asked) exits 3 at once. Exit codes: :mod:`streamwal.exitcodes`.

It sits above both the node and the cluster packages, which is why it is a module of
its own: the node package does not import the cluster's.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamwal.argtypes import count, seconds
from streamwal.cluster.client import ClusterClient
from streamwal.errors import (
    ChannelNotFoundError,
    ConfigError,
    InvalidInputError,
    NoClusterError,
    NoSuchChannelError,
    StreamwalError,
)
from streamwal.exitcodes import FAILED, NOT_FOUND, OK, USAGE
from streamwal.node.client import Acked, Consumed, NodeClient, WireMessageId
from streamwal.node.credential_options import add_credential_options, client_credentials
from streamwal.tso.config import EtcdConfig
from streamwal.tso.etcd_options import (
    add_etcd_credential_options,
    etcd_from_options,
    given_etcd_credentials,
)
from streamwal.tso.tls import ClientTLS
from streamwal.wal.backend import DeliveryPolicy, validate_channel_name
from streamwal.wal.message import MessageType

__all__ = ["consumed_json", "register"]

_POLICIES = ("all", "latest", "from", "after")


def register(sub: Any) -> None:
    produce = sub.add_parser("produce", help="append messages to a channel (stdin lines, or -m)")
    produce.add_argument("channel", help="the pchannel")
    produce.add_argument(
        "-m",
        "--message",
        action="append",
        default=[],
        help="a payload (repeat for several; without it: one message per stdin line)",
    )
    produce.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a property of every message (repeat for several)",
    )
    produce.add_argument("--type", default="insert", help="the message type (default insert)")
    produce.add_argument("--vchannel", default="", help="the vchannel (default none)")
    produce.add_argument(
        "--json", action="store_true", help="one JSON object a message: its id and time tick"
    )
    _where(produce)
    produce.set_defaults(func=_run_produce)

    consume = sub.add_parser("consume", help="read messages of a channel")
    consume.add_argument("channel", help="the pchannel")
    consume.add_argument(
        "--policy",
        choices=_POLICIES,
        help="where to start: all (default), latest, from ID (inclusive), after ID",
    )
    consume.add_argument(
        "--from", dest="from_id", metavar="ID", help="a message id (hex, as printed by --json)"
    )
    consume.add_argument("--count", type=count, help="stop after this many messages")
    consume.add_argument(
        "--timeout",
        type=seconds,
        help="stop once no message came for this many seconds (default: follow until Ctrl-C)",
    )
    consume.add_argument("--vchannel", default="", help="only this vchannel's messages")
    consume.add_argument(
        "--read-only",
        action="store_true",
        help="read without the owner: any node serves it (--node: that one, owner or "
        "not), and the read goes on while the channel changes owners",
    )
    consume.add_argument(
        "--time-ticks",
        action="store_true",
        help="also show the time ticks the WAL writes itself (counted by --count then)",
    )
    consume.add_argument(
        "--json",
        action="store_true",
        help="one JSON object a message: id, time tick, type, properties, payload",
    )
    _where(consume)
    consume.set_defaults(func=_run_consume)


def _where(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("where (one of; default: the local stack's node file)")
    where.add_argument("--node", metavar="HOST:PORT", help="one node, by its gRPC address")
    where.add_argument("--etcd", help="the cluster's etcd endpoint(s), comma separated")
    where.add_argument(
        "--cluster-prefix", help="cluster.key_prefix (with --etcd; default /streamwal)"
    )
    where.add_argument(
        "--config", type=Path, help="a node's file: its cluster, or else the node itself"
    )
    add_etcd_credential_options(parser)
    add_credential_options(parser)


@dataclass(frozen=True)
class _Target:
    """Where the messages go or come from: one node (``node``), or the cluster whose
    keys are under ``prefix`` in the etcd at ``etcd``."""

    node: str | None = None
    #: the cluster's etcd: endpoints, user and password, TLS
    etcd: EtcdConfig | None = None
    prefix: str = "/streamwal"
    tls: ClientTLS | None = None
    token: str | None = field(default=None, repr=False)

    def client(self) -> NodeClient | ClusterClient:
        if self.node is not None:
            return NodeClient(self.node, tracing=False, tls=self.tls, token=self.token)
        return ClusterClient(
            etcd=self.etcd, key_prefix=self.prefix, tracing=False, tls=self.tls, token=self.token
        )


def _target(args: argparse.Namespace) -> _Target:
    """:class:`ConfigError` (exit 2) for a file that does not load or options that
    contradict each other."""
    tls, token = client_credentials(args)
    return dataclasses.replace(_where_to(args), tls=tls, token=token)


def _where_to(args: argparse.Namespace) -> _Target:
    given = [name for name in ("node", "etcd", "config") if getattr(args, name)]
    if len(given) > 1:
        raise ConfigError("--node/--etcd/--config", f"give one of them, not {given}")
    if args.cluster_prefix and not args.etcd:
        raise ConfigError("--cluster-prefix", "goes with --etcd")
    credentials = given_etcd_credentials(args)
    if credentials and not args.etcd:
        raise ConfigError(credentials[0], "goes with --etcd (a node file has its etcd section)")
    if args.node:
        return _Target(node=args.node)
    if args.etcd:
        endpoints = tuple(e.strip() for e in args.etcd.split(",") if e.strip())
        return _Target(
            etcd=etcd_from_options(endpoints, args), prefix=args.cluster_prefix or "/streamwal"
        )
    from streamwal.node.config import load_config

    config = load_config(args.config)
    if config.cluster.enabled:
        return _Target(etcd=config.etcd, prefix=config.cluster.key_prefix)
    address = config.node.advertise_address or config.node.listen
    host, _, port = address.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return _Target(node=f"{host}:{port}")


def _properties(pairs: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError("--property", f"KEY=VALUE expected, got {pair!r}")
        out[key] = value
    return out


def _payloads(messages: list[str]) -> Iterable[bytes]:
    if messages:
        return [m.encode() for m in messages]
    return (line.rstrip("\n").encode() for line in sys.stdin)


def acked_json(acked: Acked) -> dict[str, Any]:
    """What ``produce --json`` prints of an acknowledged append."""
    return {
        "id": acked.message_id.hex(),
        "id_text": acked.message_id_text,
        "time_tick": acked.time_tick,
    }


def consumed_json(message: Consumed) -> dict[str, Any]:
    """What ``consume --json`` prints of a message: the payload as text when it is
    UTF-8, else base64 (``encoding`` says which); ``wal_record`` and ``term`` as the
    node delivered them (a reader tells the WAL's own records from the callers')."""
    try:
        payload, encoding = message.payload.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(message.payload).decode("ascii"), "base64"
    return {
        "id": message.message_id.hex(),
        "id_text": message.message_id_text,
        "time_tick": message.time_tick,
        "type": message.type,
        "vchannel": message.vchannel,
        "properties": message.properties,
        "wal_record": message.wal_record,
        "term": message.term,
        "payload": payload,
        "encoding": encoding,
    }


async def _produce(args: argparse.Namespace, target: _Target) -> int:
    properties = _properties(args.property)
    async with target.client() as client:
        for payload in _payloads(args.message):
            acked = await client.produce(
                args.channel,
                payload,
                type=args.type,
                vchannel=args.vchannel,
                properties=properties,
            )
            if args.json:
                print(json.dumps(acked_json(acked)), flush=True)
            else:
                print(f"{acked.message_id.hex()} time tick {acked.time_tick}", flush=True)
    return OK


def _policy(args: argparse.Namespace) -> DeliveryPolicy:
    kind = args.policy or ("from" if args.from_id else "all")
    if kind in ("from", "after"):
        if not args.from_id:
            raise ConfigError("--policy", f"--policy {kind} needs --from ID")
        try:
            position = WireMessageId(bytes.fromhex(args.from_id))
        except ValueError:
            raise ConfigError("--from", f"not a hex message id: {args.from_id!r}") from None
        if kind == "from":
            return DeliveryPolicy.start_from(position)
        return DeliveryPolicy.start_after(position)
    if args.from_id:
        raise ConfigError("--from", f"--from goes with --policy from or after, not {kind}")
    return DeliveryPolicy.all() if kind == "all" else DeliveryPolicy.latest()


async def _consume(args: argparse.Namespace, target: _Target) -> int:
    policy = _policy(args)
    got = 0
    async with target.client() as client:
        stream = client.consume(
            args.channel, policy, vchannel=args.vchannel, read_only=args.read_only
        )
        async with contextlib.aclosing(stream):
            while args.count is None or got < args.count:
                try:
                    message = await asyncio.wait_for(anext(stream), args.timeout)
                except (StopAsyncIteration, TimeoutError):
                    break
                if not args.time_ticks and _is_time_tick(message):
                    continue
                got += 1
                if args.json:
                    print(json.dumps(consumed_json(message)), flush=True)
                else:
                    print(_text(message.payload), flush=True)
    if args.count is not None and got < args.count:
        why = "the read ended" if args.timeout is None else f"none for {args.timeout:g}s"
        print(f"streamwal consume: {got} of {args.count} messages, then {why}", file=sys.stderr)
        return FAILED
    return OK


def _is_time_tick(message: Consumed) -> bool:
    """A time tick the WAL wrote itself (a caller's ``TimeTick`` is a caller's message)."""
    return message.wal_record and message.type == MessageType.TIME_TICK.wire_name


def _text(payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(payload).decode("ascii")


def _run(name: str, args: argparse.Namespace, body: Any) -> int:
    target: _Target | None = None
    try:
        validate_channel_name(args.channel)
        target = _target(args)
        code: int = asyncio.run(body(args, target))
        return code
    except (ChannelNotFoundError, NoClusterError) as exc:
        node = target.node if target is not None else None
        where = f" (asked node {node})" if node else ""
        print(f"streamwal {name}: {exc}{where}", file=sys.stderr)
        # a cluster's channel without an owner in time may get one: a failure, not a typo
        gone = node is not None or isinstance(exc, (NoSuchChannelError, NoClusterError))
        return NOT_FOUND if gone else FAILED
    except InvalidInputError as exc:  # a configuration or an argument: nothing was sent
        print(f"streamwal {name}: {exc}", file=sys.stderr)
        return USAGE
    except StreamwalError as exc:
        print(f"streamwal {name}: {exc}", file=sys.stderr)
        return FAILED


def _run_produce(args: argparse.Namespace) -> int:
    return _run("produce", args, _produce)


def _run_consume(args: argparse.Namespace) -> int:
    return _run("consume", args, _consume)
