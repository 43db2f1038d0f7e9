"""``streamwal tso ...``: operator commands of the timestamp oracle.

- ``tso now``: allocate one timestamp from the cluster on ``--etcd``/``--prefix``
  (through the leader's TSO service when one serves, else by briefly leading here);
- ``tso parse TS``: explain a timestamp (no I/O);
- ``tso serve``: run an oracle with its gRPC service until interrupted.

The TSO benchmark is the lab's (``streamwal bench tso``, from ``streamwal-lab``): the
product's command serves and explains timestamps, it does not measure them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from typing import Any

from streamwal import environment
from streamwal.argtypes import count, seconds
from streamwal.errors import (
    DecodeError,
    InvalidInputError,
    MisconfiguredError,
    StreamwalError,
    UnavailableError,
)
from streamwal.exitcodes import FAILED, USAGE, exit_code
from streamwal.listen import is_loopback
from streamwal.tso.config import DEFAULT_ETCD_ENDPOINT, DEFAULT_KEY_PREFIX, TsoConfig
from streamwal.tso.etcd_options import add_etcd_credential_options, etcd_from_options
from streamwal.tso.etcd_store import EtcdStore
from streamwal.tso.inprocess import InProcessTSO
from streamwal.tso.oracle import TimestampOracle
from streamwal.tso.remote import RemoteSource
from streamwal.tso.service import TsoServer
from streamwal.tso.store import LeaderRecord
from streamwal.tso.timestamp import HybridTimestamp, parse_timestamp

__all__ = ["add_etcd_arguments", "allocate_one", "config_from_args", "register"]


def add_etcd_arguments(parser: argparse.ArgumentParser) -> None:
    """``--etcd`` (repeatable, or comma-separated), ``--prefix``, ``--timeout`` and
    etcd's credentials (``--etcd-user``, ``--etcd-password-file``, TLS)."""
    parser.add_argument(
        "--etcd",
        action="append",
        metavar="HOST:PORT",
        help=f"etcd endpoint(s) (default: ${environment.ETCD_ENDPOINTS}, else "
        f"{DEFAULT_ETCD_ENDPOINT})",
    )
    parser.add_argument(
        "--prefix",
        default=DEFAULT_KEY_PREFIX,
        help="key prefix of the TSO cluster (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=5.0,
        help="seconds to wait for etcd or a serving leader (default: %(default)s)",
    )
    add_etcd_credential_options(parser)


def config_from_args(args: argparse.Namespace, **overrides: Any) -> TsoConfig:
    """A :class:`TsoConfig` from the arguments of :func:`add_etcd_arguments`."""
    given = args.etcd or list(environment.etcd_endpoints())
    endpoints = [e.strip() for item in given for e in item.split(",")]
    return TsoConfig(
        etcd=etcd_from_options([e for e in endpoints if e], args),
        key_prefix=args.prefix,
        unavailable_after_s=args.timeout,
        **overrides,
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("tso", help="timestamp oracle: allocate, explain, serve")
    parser.set_defaults(func=lambda _args: _usage(parser))
    sub = parser.add_subparsers(dest="tso_command", metavar="TSO_COMMAND")

    now = sub.add_parser("now", help="allocate one timestamp and print it")
    add_etcd_arguments(now)
    now.add_argument("--json", action="store_true", help="print one JSON object")
    now.set_defaults(func=_now)

    parse = sub.add_parser("parse", help="explain a timestamp (no I/O)")
    parse.add_argument("ts", metavar="TS", help="a timestamp, decimal or 0x hex")
    parse.add_argument("--json", action="store_true", help="print one JSON object")
    parse.set_defaults(func=_parse)

    serve = sub.add_parser("serve", help="run an oracle and its gRPC service until interrupted")
    add_etcd_arguments(serve)
    serve.add_argument("--listen", default="127.0.0.1:0", help="gRPC listen address")
    serve.add_argument("--advertise", help="address followers redirect to (default: bound)")
    serve.add_argument("--lease-ttl", type=count, default=3, help="leader lease TTL, seconds")
    serve.add_argument("--save-window", type=seconds, default=3.0, help="saved window, seconds")
    serve.add_argument("--update-interval", type=seconds, default=0.05, help="seconds")
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="serve a --listen other hosts reach although this service has no TLS or auth",
    )
    serve.set_defaults(func=_serve)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return USAGE


def _print_ts(ts: int, as_json: bool) -> None:
    info = HybridTimestamp.of(ts)
    if as_json:
        print(json.dumps(info.as_dict()))
        return
    print(f"timestamp  {info.timestamp}")
    print(f"physical   {info.physical_iso}  ({info.physical_ms} ms since the Unix epoch, UTC)")
    print(f"logical    {info.logical}")


def _parse(args: argparse.Namespace) -> int:
    try:
        ts = parse_timestamp(args.ts)
        _print_ts(ts, args.json)
    except InvalidInputError as exc:  # the argument is wrong: nothing to try again
        print(f"error: {exc}", file=sys.stderr)
        return USAGE
    except StreamwalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return FAILED
    return 0


async def allocate_one(config: TsoConfig) -> int:
    """One timestamp from the cluster of ``config``.

    Asks the leader's TSO service when the leader key names one; otherwise (or when
    that leader does not answer) campaigns here, serves one timestamp and resigns.
    Leading here persists a new save window, so the next leader of the cluster starts
    up to one window ahead of the wall clock (as after any leader change).
    """
    async with EtcdStore.from_config(config) as store:
        raw = await store.get(config.leader_key)
    address = ""
    if raw is not None:
        with contextlib.suppress(DecodeError):
            address = LeaderRecord.decode(raw).address
    if address:
        remote = RemoteSource(address, timeout_s=min(config.unavailable_after_s, 2.0))
        try:
            return await remote.fetch(1)
        except UnavailableError:
            pass  # a leader that died with its key still alive: wait it out below
        finally:
            await remote.close()
    # A dead leader's key lives on for up to one lease: wait that out too.
    wait_s = config.unavailable_after_s + config.lease_ttl_s
    async with InProcessTSO(config, leader_wait_s=wait_s) as tso:
        return await tso.source.fetch(1)


def _now(args: argparse.Namespace) -> int:
    def command() -> int:
        _print_ts(asyncio.run(allocate_one(config_from_args(args))), args.json)
        return 0

    return exit_code(command, "error")


def check_exposure(listen: str, insecure: bool) -> None:
    """``tso serve`` has no TLS and no auth: a ``listen`` other hosts reach would hand
    timestamps (and a way to push the oracle's window ahead) to anyone, so it is
    refused unless ``insecure`` says so on purpose (:class:`MisconfiguredError`)."""
    if is_loopback(listen) or insecure:
        return
    raise MisconfiguredError(
        f"refusing to serve: --listen {listen!r} is reachable from other hosts and the "
        "standalone TSO service has no TLS or auth; listen on a loopback address, run the "
        "oracle in a node (tso.mode: in-process, whose TSO service is behind node.tls "
        "and auth), or pass --insecure to serve anyway"
    )


async def _serve_async(args: argparse.Namespace) -> int:
    check_exposure(args.listen, args.insecure)
    config = config_from_args(
        args,
        lease_ttl_s=args.lease_ttl,
        save_window_s=args.save_window,
        update_interval_s=args.update_interval,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    # The oracle advertises the service's address: bind first, then attach the oracle.
    server = TsoServer(None, args.listen)
    await server.start()
    oracle = TimestampOracle(config, address=args.advertise or server.address)
    server.attach(oracle)
    try:
        await oracle.start()
        print(f"TSO service on {server.address} (advertised {oracle.address})", flush=True)
        await stop.wait()
    finally:
        await server.close()
        await oracle.close()
    return 0


def _serve(args: argparse.Namespace) -> int:
    return exit_code(lambda: asyncio.run(_serve_async(args)), "error")
