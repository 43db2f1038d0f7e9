"""``streamwal cluster``: status, drain, channels add/remove.

The cluster is found from a node's file (``--config``: its ``etcd:`` and ``cluster:``
sections) or from ``--etcd`` and ``--prefix``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from streamwal.cluster.operations import add_channels, drain_node, remove_channels, render_status
from streamwal.cluster.records import ClusterKeys
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import read_view
from streamwal.errors import StreamwalError

__all__ = ["register"]


def register(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="a self-managing cluster: status, drain, channels")
    cluster.add_argument("--config", type=Path, help="a node's file (etcd and cluster sections)")
    cluster.add_argument("--etcd", help="etcd endpoint(s), comma separated (instead of --config)")
    cluster.add_argument("--prefix", help="cluster.key_prefix (default /streamwal)")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = actions.add_parser("status", help="nodes, channels, owners, states, last moves")
    status.add_argument("--moves", type=int, default=10, help="how many recent moves to show")
    status.set_defaults(func=_run, op="status")
    drain = actions.add_parser("drain", help="move a node's channels away and wait")
    drain.add_argument("node", type=int)
    drain.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    drain.set_defaults(func=_run, op="drain")
    channels = actions.add_parser("channels", help="change the cluster's channel set")
    change = channels.add_subparsers(dest="change", metavar="CHANGE", required=True)
    for name in ("add", "remove"):
        p = change.add_parser(name, help=f"{name} channels")
        p.add_argument("names", nargs="+")
        p.set_defaults(func=_run, op=name)


def _store_and_keys(args: argparse.Namespace) -> tuple[ClusterStore, ClusterKeys]:
    from streamwal.node.config import load_config

    if args.etcd:
        endpoints = [e.strip() for e in args.etcd.split(",") if e.strip()]
        return ClusterStore(endpoints), ClusterKeys(args.prefix or "/streamwal")
    config = load_config(args.config)
    store = ClusterStore.from_settings(config.etcd, unavailable_after_s=5.0)
    return store, ClusterKeys(args.prefix or config.cluster.key_prefix)


async def _act(args: argparse.Namespace) -> str:
    store, keys = _store_and_keys(args)
    async with store:
        if args.op == "status":
            return render_status(await read_view(store, keys), moves=args.moves)
        if args.op == "drain":
            view = await drain_node(store, keys, args.node, timeout_s=args.timeout)
            return f"node {args.node} drained\n" + render_status(view)
        if args.op == "add":
            await add_channels(store, keys, args.names)
        else:
            await remove_channels(store, keys, args.names)
        return f"channels {args.op}: {' '.join(args.names)}"


def _run(args: argparse.Namespace) -> int:
    try:
        print(asyncio.run(_act(args)))
    except StreamwalError as exc:
        print(f"streamwal cluster {args.op}: {exc}", file=sys.stderr)
        return 1
    return 0
