"""What a cluster answers a typo, against real node processes: an unknown channel is
:class:`NoSuchChannelError` at once through either client form, a wrong key prefix
says there is no cluster under it, ``cluster channels remove`` of an unknown channel
exits 3 and removes nothing, and the console producer and consumer round-trip through
the cluster and exit 3 on a channel that does not exist, creating nothing.

One cluster serves every check of the module's test: none of them moves a channel.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.cluster import ClusterClient
from streamwal.errors import NoClusterError, NoSuchChannelError
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.topics import list_topics
from tests.cluster.harness import TestCluster
from tests.node.processes import streamwal_cli

pytestmark = pytest.mark.integration

#: "at once": one look-up, far below the client's 30 s of retries
_AT_ONCE_S = 1.5


async def _typo_is_refused_at_once(client: ClusterClient, typo: str) -> str:
    started = time.monotonic()
    with pytest.raises(NoSuchChannelError) as err:
        await client.produce(typo, b"never written")
    assert time.monotonic() - started < _AT_ONCE_S, time.monotonic() - started
    return str(err.value)


async def test_a_cluster_answers_typos_at_once_and_the_console_round_trips(
    make_cluster: Callable[..., TestCluster], stack: StackInfo, unique: str
) -> None:
    cluster = make_cluster(1)
    await cluster.serve(1)
    (channel,) = cluster.channels
    typo = f"{channel}-typo"
    node = cluster.nodes[1]

    # an unknown channel, both client forms: NoSuchChannelError at once
    async with ClusterClient(nodes=[node.address], retry_for_s=30.0) as through_nodes:
        said = await _typo_is_refused_at_once(through_nodes, typo)
        assert "does not exist" in said and "not in the cluster's channel set" in said, said
        assert (await through_nodes.produce(channel, b"known")).time_tick > 0
    async with ClusterClient([stack.etcd_endpoint], key_prefix=cluster.prefix) as through_etcd:
        said = await _typo_is_refused_at_once(through_etcd, typo)
        assert "does not exist" in said, said

    # a wrong prefix: no cluster there, said as such, at once
    wrong = f"{cluster.prefix}-wrong"
    async with ClusterClient([stack.etcd_endpoint], key_prefix=wrong) as lost:
        started = time.monotonic()
        with pytest.raises(NoClusterError) as no_cluster:
            await lost.produce(channel, b"never written")
        assert time.monotonic() - started < _AT_ONCE_S
    assert f"no cluster under {wrong}/cluster/" in str(no_cluster.value)
    assert "no owner" not in str(no_cluster.value)

    # removing a channel the set does not hold: exit 3, and nothing removed
    where = ("--etcd", stack.etcd_endpoint, "--prefix", cluster.prefix)
    removed = await streamwal_cli("cluster", "channels", "remove", typo, channel, *where)
    assert removed.returncode == 3, removed
    assert f"'{typo}' does not exist" in removed.stderr and "nothing removed" in removed.stderr
    assert removed.stdout == ""
    assert channel in (await cluster.view()).channels

    # the console through the cluster: by its etcd and prefix, and by a node's file
    by_etcd = ("--etcd", stack.etcd_endpoint, "--cluster-prefix", cluster.prefix)
    by_file = ("--config", str(node.config_path))
    produced = await streamwal_cli(
        "produce", channel, "--json", "--property", "k=v", *by_etcd, stdin="one\ntwo\n"
    )
    assert produced.returncode == 0, produced
    acks = [json.loads(line) for line in produced.stdout.splitlines()]
    assert len(acks) == 2 and all(a["time_tick"] > 0 and a["id"] for a in acks), acks
    again = await streamwal_cli("produce", channel, "-m", "three", "--json", *by_file)
    assert again.returncode == 0, again
    acks.append(json.loads(again.stdout))
    consumed = await streamwal_cli(
        "consume", channel, "--json", "--policy", "from", "--from", acks[0]["id"],
        "--count", "3", "--timeout", "20", *by_file,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed
    read = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert [m["payload"] for m in read] == ["one", "two", "three"], read
    assert [m["id"] for m in read] == [a["id"] for a in acks]
    assert [m["time_tick"] for m in read] == [a["time_tick"] for a in acks]
    assert read[0]["properties"] == {"k": "v"} and read[2]["properties"] == {}
    assert {m["type"] for m in read} == {"insert"} and {m["encoding"] for m in read} == {"utf-8"}

    # a channel that does not exist: exit 3 for both, and nothing created anywhere
    missing = f"{channel}-missing"
    for args in (("consume", missing, "--timeout", "5"), ("produce", missing, "-m", "x")):
        refused = await streamwal_cli(*args, *by_etcd)
        assert refused.returncode == 3, refused
        assert f"'{missing}' does not exist" in refused.stderr, refused.stderr
    view = await cluster.view()
    assert missing not in view.channels and missing not in view.assignments
    assert PulsarConfig().topic(missing) not in await list_topics(stack.pulsar_admin_url)
