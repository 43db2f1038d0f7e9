"""A cluster as an operator runs it (issue 28): `cluster status` in either option
order, as JSON, honest about a dead owner and a wrong prefix; `cluster undrain`;
a node that cannot reach its broker gets no channel, and a channel its owner keeps
failing to open moves to a ready node within the bound."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from streamwal.cluster import ClusterClient
from streamwal.cluster.records import MoveReason
from streamwal.errors import NoSuchChannelError
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster, owners
from tests.node.processes import free_port, streamwal_cli

pytestmark = pytest.mark.integration

#: the open-failure bound these clusters run with (cluster.open_failure_bound_s)
HEAL_S = 3.0


@pytest.fixture
def cluster_tag() -> str:
    return "op"


@pytest.fixture
def cluster_defaults() -> dict[str, Any]:
    return {"open_failure_bound_s": HEAL_S}


async def test_status_in_either_option_order_as_json_with_a_dead_owner_and_a_wrong_prefix(
    make_cluster: Callable[..., TestCluster], stack: StackInfo
) -> None:
    cluster = make_cluster(2)
    await cluster.serve(1)
    config = str(cluster.nodes[1].config_path)
    after = await streamwal_cli("cluster", "status", "--config", config)
    before = await streamwal_cli("cluster", "--config", config, "status")
    assert after.returncode == before.returncode == 0, (after.stderr, before.stderr)
    assert "serving" in after.stdout and cluster.channels[0] in after.stdout
    done = await streamwal_cli("cluster", "status", "--json", "--config", config)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["schema"] == 1 and status["balancer"]["node"] == 1
    assert [n["id"] for n in status["nodes"]] == [1] and status["nodes"][0]["ready"] is True
    by_name = {c["name"]: c for c in status["channels"]}
    assert set(by_name) == set(cluster.channels)
    for channel in by_name.values():
        assert channel["owner"] == 1 and channel["owner_live"] is True
        assert channel["state"] == "serving" and channel["serving"] is True
        assert isinstance(channel["since_ms"], int)
    # a ClusterClient answers a channel the cluster does not have at once
    async with ClusterClient([stack.etcd_endpoint], key_prefix=cluster.prefix) as client:
        started = time.monotonic()
        with pytest.raises(NoSuchChannelError, match="does not exist"):
            await client.produce("not-in-this-cluster", b"x")
        assert time.monotonic() - started < 5
    await cluster.nodes[1].kill()
    await cluster.wait_for("node 1's lease gone", lambda v: not v.nodes, timeout=10)
    where = ("--etcd", stack.etcd_endpoint, "--prefix", cluster.prefix)
    done = await streamwal_cli("cluster", "status", "--json", *where)
    status = json.loads(done.stdout)
    assert status["nodes"] == []
    for channel in status["channels"]:
        assert channel["owner"] == 1 and channel["owner_live"] is False
        assert channel["serving"] is False and channel["state"] == "not serving (node gone)"
    text = await streamwal_cli("cluster", "status", "--config", config)
    assert "node 1 (gone)  not serving (node gone)" in text.stdout, text.stdout
    wrong = await streamwal_cli(
        "cluster", "status", "--config", config, "--prefix", cluster.prefix + "-typo"
    )
    assert wrong.returncode == 3, wrong
    assert "no cluster under" in wrong.stderr and wrong.stdout == ""


async def test_undrain_lets_a_drained_node_take_channels_again(
    make_cluster: Callable[..., TestCluster],
) -> None:
    cluster = make_cluster(4)
    await cluster.start(1, 2)
    await cluster.wait_balanced()
    config = str(cluster.nodes[1].config_path)
    drained = await streamwal_cli("cluster", "drain", "2", "--config", config, "--timeout", "30")
    assert drained.returncode == 0, drained.stderr
    assert 2 not in owners(await cluster.view()).values()
    undrained = await streamwal_cli("cluster", "undrain", "2", "--config", config)
    assert undrained.returncode == 0, undrained.stderr
    view = await cluster.wait_balanced()
    assert sorted(owners(view).values()) == [1, 1, 2, 2]
    again = await streamwal_cli("cluster", "undrain", "2", "--config", config)
    assert again.returncode == 1 and "is not drained" in again.stderr


async def test_a_node_without_its_broker_gets_no_channel_and_a_failing_open_moves(
    make_cluster: Callable[..., TestCluster], stack: StackInfo
) -> None:
    """Node 3 has a wrong broker URL: registered, not ready, given nothing although
    the others hold everything. Node 1 restarted with a wrong broker URL (within the
    grace period, so it keeps its assignments) fails to open them: each moves to a
    ready node within the bound, and the move says why."""
    # the lease alone tells node 1 gone: its restart comes before any peer could call
    # its refused port evidence of death, and this test is about a node that is back
    cluster = make_cluster(4, grace_period_s=30.0, probe_refusals=0)
    await cluster.start(1, 2)
    await cluster.wait_balanced()
    wrong: dict[str, Any] = {"service_url": f"pulsar://127.0.0.1:{free_port()}"}
    wrong["operation_timeout_s"] = 1
    cluster.extra = {"pulsar": wrong}
    bad = cluster.node(3)
    with pytest.raises(TimeoutError):
        await bad.start(timeout=6)
    view = await cluster.view()
    assert view.nodes[3].ready is False and "connection refused" in view.nodes[3].not_ready
    await asyncio.sleep(2.0)  # several balancing rounds: a ready node 3 would get one
    view = await cluster.view()
    assert 3 not in owners(view).values() and all(view.serving(c) for c in cluster.channels)

    held = [c for c, node in owners(view).items() if node == 1]
    assert held
    await cluster.nodes[1].kill()
    node1 = cluster.nodes[1]
    node1.config_path.write_text(
        node1.config_path.read_text().replace(stack.pulsar_url, wrong["service_url"])
    )
    cluster.nodes[1].log_path.rename(node1.log_path.with_suffix(".first.log"))
    restarted = time.monotonic()
    with pytest.raises(TimeoutError):
        await node1.start(timeout=4)
    view = await cluster.wait_for(
        "node 1's channels serving on node 2",
        lambda v: all(v.serving(c) and v.assignments[c].node == 2 for c in held),
        timeout=60,
    )
    took = time.monotonic() - restarted
    moves = {m.channel: m for _k, m in view.moves if m.channel in held and m.node == 2}
    assert {c: m.reason for c, m in moves.items()} == dict.fromkeys(held, MoveReason.OPEN_FAILED)
    assert all("failed opens" in m.detail or "opening for" in m.detail for m in moves.values())
    # the failing open ends within the client's bound (1 s), then the bound (3 s)
    print(f"moved off the broken node in {took:.1f}s")
    assert took < 20, took
    assert 1 not in owners(view).values() and 3 not in owners(view).values()
