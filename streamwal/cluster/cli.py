"""``streamwal cluster``: status, move, drain, undrain, channels add/remove, delete.

The cluster is found from a node's file (``--config``: its ``etcd:`` and ``cluster:``
sections) or from ``--etcd`` and ``--prefix``. These options go before the action or
after it (``streamwal cluster status --config node1.yaml``): operators write both.
With ``--etcd``, the etcd user (``--etcd-user``, ``--etcd-password-file``) and TLS
(``--etcd-ca-file``, ``--etcd-cert-file``, ``--etcd-key-file``) are options; with
``--config``, the file's ``etcd:`` section says them (docs/auth.md, "Cluster
operations").

Deleting topics (``channels remove --delete-topics``, ``delete --delete-topics``) and
deleting a cluster cannot be undone: on a terminal they ask first; elsewhere (a
script, a pipe) they refuse unless ``--yes`` says the question was answered.

Exit codes (docs/cli.md, "Exit codes"): 0; 1 when an action fails or is refused (etcd
unreachable, a drain or a move that timed out, a move to a drained or not-ready node or
of a channel being moved already, live nodes under a cluster to delete, a deletion not
confirmed); 2 when ``--config`` names a file that is not a valid node configuration;
3 when a thing named is missing: no cluster under the prefix (no node, no balancer, no
channel set: most often a wrong ``--prefix`` or ``--config``), a channel not in the set
(``channels remove``: nothing is removed then; with ``--delete-topics`` its topic is
still deleted, which finishes a removal whose topic deletion failed) or a node that is
not a live member (``move``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamwal.argtypes import count_or_zero, seconds
from streamwal.cluster.channel_records import ClusterChannelRecords, delete_channels
from streamwal.cluster.moving import NoSuchNodeError, move_channel
from streamwal.cluster.operations import (
    LiveNodesError,
    add_channels,
    cluster_topics_channels,
    delete_cluster_keys,
    delete_topics,
    drain_node,
    node_liveness,
    remove_channels,
    render_status,
    require_no_live_nodes,
    status_json,
    undrain_node,
    wait_unserved,
)
from streamwal.cluster.records import ClusterKeys
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import (
    ConfigError,
    InvalidInputError,
    NoClusterError,
    NoSuchChannelError,
)
from streamwal.exitcodes import NOT_FOUND, exit_code
from streamwal.node.confirm import NotConfirmedError, confirm
from streamwal.tso.config import DEFAULT_KEY_PREFIX
from streamwal.tso.etcd_options import (
    add_etcd_credential_options,
    etcd_from_options,
    given_etcd_credentials,
)
from streamwal.wal.backend import validate_channel_name
from streamwal.wal.deletion import ChannelDeletion

if TYPE_CHECKING:
    from streamwal.adaptors.pulsar.admin import PulsarAdmin
    from streamwal.adaptors.pulsar.config import PulsarConfig

__all__ = ["NoClusterError", "NotConfirmedError", "register"]

#: exit code when nothing of a cluster is found under the prefix
NO_CLUSTER = NOT_FOUND


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
    add_etcd_credential_options(parser, default=default)


def register(sub: Any) -> None:
    cluster = sub.add_parser(
        "cluster", help="a self-managing cluster: status, move, drain, undrain, channels, delete"
    )
    _where(cluster, top=True)
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = actions.add_parser("status", help="nodes, channels, owners, states, last moves")
    _where(status, top=False)
    status.add_argument(
        "--moves", type=count_or_zero, default=10, help="how many recent moves to show"
    )
    status.add_argument(
        "--json", action="store_true", help="print the status as JSON (docs/deploy.md: schema)"
    )
    status.set_defaults(func=_run, op="status")
    move = actions.add_parser(
        "move", help="move one channel to one node (the balancer does it) and wait until it serves"
    )
    _where(move, top=False)
    move.add_argument("channel")
    move.add_argument("--to", type=int, required=True, metavar="NODE", help="the node's id")
    move.add_argument(
        "--timeout", type=seconds, default=30.0, help="seconds to wait for the new owner to serve"
    )
    move.set_defaults(func=_run, op="move")
    drain = actions.add_parser("drain", help="move a node's channels away and wait")
    _where(drain, top=False)
    drain.add_argument("node", type=int)
    drain.add_argument("--timeout", type=seconds, default=60.0, help="seconds to wait")
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
        if name == "remove":
            _deleting(p, what="wait until no node serves the channels, then delete their topics")
    delete = actions.add_parser(
        "delete", help="delete every key of the cluster (and, asked, its channels' topics)"
    )
    _where(delete, top=False)
    _deleting(delete, what="also delete the topic of every channel in the set or assigned")
    delete.add_argument(
        "--force", action="store_true", help="delete even while live nodes are registered"
    )
    delete.set_defaults(func=_run, op="delete")


def _deleting(parser: argparse.ArgumentParser, *, what: str) -> None:
    """The options of an action that may delete topics."""
    parser.add_argument("--delete-topics", action="store_true", help=what)
    parser.add_argument(
        "--yes", action="store_true", help="do not ask (needed when stdin is not a terminal)"
    )
    parser.add_argument(
        "--timeout", type=seconds, default=60.0, help="seconds to wait for the channels to close"
    )
    parser.add_argument(
        "--pulsar-admin-url",
        help="the broker's admin API (default: the node file's pulsar.admin_url, or the "
        "one beside pulsar.service_url)",
    )


def _store_and_keys(args: argparse.Namespace) -> tuple[ClusterStore, ClusterKeys]:
    from streamwal.node.config import load_config

    if args.etcd:
        endpoints = [e.strip() for e in args.etcd.split(",") if e.strip()]
        etcd = etcd_from_options(endpoints, args)
        store = ClusterStore.from_settings(etcd, unavailable_after_s=5.0)
        return store, ClusterKeys(args.prefix or DEFAULT_KEY_PREFIX)
    credentials = given_etcd_credentials(args)
    if credentials:
        raise ConfigError(credentials[0], "goes with --etcd (a node file has its etcd section)")
    config = load_config(args.config)
    store = ClusterStore.from_settings(config.etcd, unavailable_after_s=5.0)
    return store, ClusterKeys(args.prefix or config.cluster.key_prefix)


def _require_cluster(view: ClusterView, keys: ClusterKeys) -> None:
    if not (view.nodes or view.balancer_node is not None or view.seeded or view.channels):
        raise NoClusterError(keys.root)


def _require_in_set(view: ClusterView, keys: ClusterKeys, names: list[str]) -> None:
    """Refuse, before anything changes, to remove a channel the set does not hold: a
    typo reported as removed would leave the operator believing it gone. Before the
    first balancer seeded the set there is no set to check against."""
    unknown = [c for c in names if c not in view.channels]
    if view.seeded and unknown:
        raise NoSuchChannelError(
            unknown[0],
            f"not in the channel set of the cluster under {keys.root}; nothing removed"
            + (f" (also not in it: {' '.join(unknown[1:])})" if unknown[1:] else ""),
        )


def _pulsar(args: argparse.Namespace) -> tuple[PulsarConfig, PulsarAdmin]:
    """Where the channels' topics are: the node file's ``pulsar:`` section (tenant,
    namespace, token, TLS), its admin URL overridden by ``--pulsar-admin-url``. Without
    the file there is no deleting: a guess could delete topics of the same names in
    another tenant or on another broker than the cluster's."""
    from streamwal.adaptors.pulsar.admin import PulsarAdmin, admin_url_for
    from streamwal.adaptors.pulsar.config import PulsarConfig
    from streamwal.node.config import load_config

    if args.etcd and args.config is None:
        # the topics' tenant and namespace are in the nodes' file: a guess
        # (public/default) could delete another system's topics of the same names
        raise InvalidInputError(
            "--delete-topics needs --config (a node's file: it names the broker, tenant and "
            "namespace of the channels' topics)"
        )
    pulsar = PulsarConfig() if args.config is None else load_config(args.config).pulsar
    url = args.pulsar_admin_url or pulsar.admin_url or admin_url_for(pulsar.service_url)
    if url is None:
        raise InvalidInputError(
            "--delete-topics: give --pulsar-admin-url (the broker's admin API): none is "
            f"known beside {pulsar.service_url}"
        )
    admin = PulsarAdmin(
        url,
        token=pulsar.auth_token,
        trust_certs_file=pulsar.tls_trust_certs_file,
        allow_insecure=pulsar.tls_allow_insecure,
        timeout=pulsar.operation_timeout_s,
    )
    return pulsar, admin


def _deletion_line(topic: str, done: ChannelDeletion | None) -> str:
    if done is None:
        return f"topic {topic} already missing (nothing to delete)"
    if done.log_deleted:
        return (
            f"topic {topic} deleted ({done.subscriptions_deleted} subscriptions, "
            f"{done.keys_deleted} keys)"
        )
    return f"topic {topic} already missing ({done.keys_deleted} keys of it deleted)"


def _topic_lines(outcome: dict[str, bool]) -> list[str]:
    return [
        f"topic {topic} {'deleted' if deleted else 'already missing (nothing to delete)'}"
        for topic, deleted in sorted(outcome.items())
    ]


async def _status(store: ClusterStore, keys: ClusterKeys, args: argparse.Namespace) -> str:
    view = await read_view(store, keys)
    _require_cluster(view, keys)
    liveness = await node_liveness(store, view)
    if args.json:
        return json.dumps(status_json(view, keys, moves=args.moves, liveness=liveness), indent=2)
    return render_status(view, moves=args.moves, liveness=liveness)


async def _remove(store: ClusterStore, keys: ClusterKeys, args: argparse.Namespace) -> str:
    """Remove channels; with ``--delete-topics`` also their topics, once no node
    serves them (confirmed before anything changes, so a refusal leaves the set)."""
    names = [validate_channel_name(c) for c in args.names]
    if not args.delete_topics:
        # with --delete-topics a channel already out of the set is how a run whose
        # topic deletion failed is finished: its topic is still deleted
        _require_in_set(await read_view(store, keys), keys, names)
        await remove_channels(store, keys, names)
        return f"channels remove: {' '.join(names)}"
    pulsar, admin = _pulsar(args)
    topics = [pulsar.topic(c) for c in names]
    confirm(f"delete {len(topics)} topics ({', '.join(topics)})", yes=args.yes)
    deadline = time.monotonic() + args.timeout
    await remove_channels(store, keys, names)
    await wait_unserved(store, keys, names, timeout_s=args.timeout)
    from streamwal.adaptors.pulsar.opener import PulsarOpener

    opener = PulsarOpener(dataclasses.replace(pulsar, admin_url=admin.url))
    try:
        outcome = await delete_channels(
            opener,
            names,
            [ClusterChannelRecords(store, keys)],
            timeout_s=max(0.0, deadline - time.monotonic()),
        )
    finally:
        await opener.close()
    lines = [_deletion_line(pulsar.topic(c), d) for c, d in outcome.items()]
    return "\n".join([f"channels remove: {' '.join(names)}", *lines])


async def _delete(store: ClusterStore, keys: ClusterKeys, args: argparse.Namespace) -> str:
    """Delete the cluster: topics first, so a topic deletion that fails leaves the
    keys (the channel list) to try again with."""
    _revision, entries = await store.read_prefix(keys.root)
    if not entries:
        raise NoClusterError(keys.root, "no key at all")
    view = await read_view(store, keys)
    if not args.force:  # refused before anything is asked
        require_no_live_nodes(view, keys)
    topics: list[str] = []
    admin: PulsarAdmin | None = None
    if args.delete_topics:
        pulsar, admin = _pulsar(args)
        topics = [pulsar.topic(c) for c in sorted(cluster_topics_channels(view))]
    what = f"delete the cluster under {keys.root} ({len(entries)} keys)"
    if args.delete_topics:
        what += f" and {len(topics)} topics ({', '.join(topics) or 'none'})"
    confirm(what, yes=args.yes)
    lines: list[str] = []
    if admin is not None:
        lines = _topic_lines(await delete_topics(admin, topics, timeout_s=args.timeout))
    try:
        deleted = await delete_cluster_keys(store, keys, force=args.force)
    except LiveNodesError as exc:  # a node registered meanwhile: say which topics went
        raise LiveNodesError("\n".join([str(exc), *lines])) from None
    return "\n".join([f"deleted {deleted} keys under {keys.root}", *lines])


async def _act(args: argparse.Namespace) -> str:
    store, keys = _store_and_keys(args)
    async with store:
        if args.op == "status":
            return await _status(store, keys, args)
        if args.op == "delete":
            return await _delete(store, keys, args)
        _require_cluster(await read_view(store, keys), keys)
        if args.op == "drain":
            view = await drain_node(store, keys, args.node, timeout_s=args.timeout)
            return f"node {args.node} drained\n" + render_status(view)
        if args.op == "move":
            result = await move_channel(store, keys, args.channel, args.to, timeout_s=args.timeout)
            if not result.trace_id:
                return f"channel {result.channel} is on node {result.node} already"
            return (
                f"channel {result.channel} moved from node {result.previous} to node "
                f"{result.node} (requested); trace {result.trace_id}"
            )
        if args.op == "undrain":
            await undrain_node(store, keys, args.node)
            return f"node {args.node} undrained: the balancer moves channels onto it in steps"
        if args.op == "remove":
            return await _remove(store, keys, args)
        await add_channels(store, keys, args.names)
        return f"channels add: {' '.join(args.names)}"


def _run(args: argparse.Namespace) -> int:
    def command() -> int:
        print(asyncio.run(_act(args)))
        return 0

    return exit_code(
        command,
        f"streamwal cluster {args.op}",
        not_found=(NoClusterError, NoSuchChannelError, NoSuchNodeError),
    )
