"""``streamwal cluster``: status, drain, undrain, channels add/remove.

The cluster is found from a node's file (``--config``: its ``etcd:`` and ``cluster:``
sections) or from ``--etcd`` and ``--prefix``. These options go before the action or
after it (``streamwal cluster status --config node1.yaml``): operators write both.

Exit codes: 0; 1 when an action fails (etcd unreachable, a drain that timed out);
3 when there is no cluster under the prefix (no node, no balancer, no channel set:
most often a wrong ``--prefix`` or ``--config``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from streamwal.cluster.operations import (
    add_channels,
    drain_node,
    remove_channels,
    render_status,
    status_json,
    undrain_node,
)
from streamwal.cluster.records import ClusterKeys
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import StreamwalError

__all__ = ["NoClusterError", "register"]

#: exit code when nothing of a cluster is found under the prefix
NO_CLUSTER = 3


class NoClusterError(StreamwalError):
    """Nothing of a cluster under the prefix: reading it as an empty cluster would
    hide a wrong ``--prefix`` or ``--config``."""


def _where(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The options that find the cluster. Below an action they default to SUPPRESS,
    so an option given before the action is not reset by the action's parser."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--config", type=Path, default=default, help="a node's file (etcd and cluster sections)"
    )
    parser.add_argument(
        "--etcd", default=default, help="etcd endpoint(s), comma separated (instead of --config)"
    )
    parser.add_argument("--prefix", default=default, help="cluster.key_prefix (default /streamwal)")


def register(sub: Any) -> None:
    cluster = sub.add_parser(
        "cluster", help="a self-managing cluster: status, drain, undrain, channels"
    )
    _where(cluster, top=True)
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = actions.add_parser("status", help="nodes, channels, owners, states, last moves")
    _where(status, top=False)
    status.add_argument("--moves", type=int, default=10, help="how many recent moves to show")
    status.add_argument(
        "--json", action="store_true", help="print the status as JSON (docs/deploy.md: schema)"
    )
    status.set_defaults(func=_run, op="status")
    drain = actions.add_parser("drain", help="move a node's channels away and wait")
    _where(drain, top=False)
    drain.add_argument("node", type=int)
    drain.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    drain.set_defaults(func=_run, op="drain")
    undrain = actions.add_parser(
        "undrain", help="let a drained node take channels again (balanced onto it in steps)"
    )
    _where(undrain, top=False)
    undrain.add_argument("node", type=int)
    undrain.set_defaults(func=_run, op="undrain")
    channels = actions.add_parser("channels", help="change the cluster's channel set")
    _where(channels, top=False)
    change = channels.add_subparsers(dest="change", metavar="CHANGE", required=True)
    for name in ("add", "remove"):
        p = change.add_parser(name, help=f"{name} channels")
        _where(p, top=False)
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


def _require_cluster(view: ClusterView, keys: ClusterKeys) -> None:
    if not (view.nodes or view.balancer_node is not None or view.seeded or view.channels):
        raise NoClusterError(
            f"no cluster under {keys.root} (no node, no balancer, no channel set): "
            "check --prefix (cluster.key_prefix) and --etcd/--config"
        )


async def _act(args: argparse.Namespace) -> str:
    store, keys = _store_and_keys(args)
    async with store:
        if args.op == "status":
            view = await read_view(store, keys)
            _require_cluster(view, keys)
            if args.json:
                return json.dumps(status_json(view, keys, moves=args.moves), indent=2)
            return render_status(view, moves=args.moves)
        _require_cluster(await read_view(store, keys), keys)
        if args.op == "drain":
            view = await drain_node(store, keys, args.node, timeout_s=args.timeout)
            return f"node {args.node} drained\n" + render_status(view)
        if args.op == "undrain":
            await undrain_node(store, keys, args.node)
            return f"node {args.node} undrained: the balancer moves channels onto it in steps"
        if args.op == "add":
            await add_channels(store, keys, args.names)
        else:
            await remove_channels(store, keys, args.names)
        return f"channels {args.op}: {' '.join(args.names)}"


def _run(args: argparse.Namespace) -> int:
    try:
        print(asyncio.run(_act(args)))
    except NoClusterError as exc:
        print(f"streamwal cluster {args.op}: {exc}", file=sys.stderr)
        return NO_CLUSTER
    except StreamwalError as exc:
        print(f"streamwal cluster {args.op}: {exc}", file=sys.stderr)
        return 1
    return 0
