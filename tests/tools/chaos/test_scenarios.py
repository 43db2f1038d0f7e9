"""Each fault scenario, with the few rounds of the default test run, on the real stack.

A scenario passes when the history checker finds no violation in any channel it
wrote, every acknowledgement its clients recorded is in the log, and the scenario's
own expectations held (the fault bit, the system recovered). The full round counts
run with ``STREAMWAL_SLOW=1`` (or ``streamwal chaos``).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from streamwal_lab.chaos import SCENARIOS, ScenarioResult, run_scenario
from streamwal_lab.chaos.scenarios.brokers import FAULTS
from streamwal_lab.chaos.services import PrivatePulsar
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.cluster import ClusterInfo
from streamwal_lab.stack.topics import list_topics

pytestmark = pytest.mark.integration


async def _run(
    name: str,
    rounds: int,
    stack: StackInfo,
    tmp_path: Path,
    *,
    drop_topics: bool = False,
    stock: PrivatePulsar | None = None,
) -> ScenarioResult:
    """``drop_topics``: delete the run's topics afterwards (large ones fill the bookie);
    ``stock``: the session's stock broker, lent to a scenario that would start one."""
    seed = random.SystemRandom().randrange(1 << 31)
    result = await run_scenario(
        SCENARIOS[name],
        rounds,
        pulsar_url=stack.pulsar_url,
        etcd_endpoint=stack.etcd_endpoint,
        workdir=tmp_path,
        seed=seed,
        pulsar_admin_url=stack.pulsar_admin_url if drop_topics else None,
        stock_pulsar=stock,
    )
    detail = f"seed {seed}, logs in {tmp_path}:\n" + "\n".join(
        result.violations[:20] + result.problems[:20]
    )
    assert result.ok, detail
    assert result.rounds == rounds, detail
    assert result.faults >= rounds, detail
    assert result.acks_checked > 0, detail
    assert result.acked_violations == 0, detail
    return result


async def _quick(name: str, stack: StackInfo, tmp_path: Path) -> ScenarioResult:
    return await _run(name, SCENARIOS[name].quick_rounds, stack, tmp_path)


async def test_takeover_race(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("takeover-race", stack, tmp_path)
    assert result.ownerships == result.rounds + 1  # one first time tick per takeover


async def test_kill_9_of_the_owner(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("kill-9-owner", stack, tmp_path)
    assert result.ownerships == result.rounds + 1


async def test_broker_restart_during_appends_and_a_first_time_tick(
    stack: StackInfo, tmp_path: Path
) -> None:
    result = await _quick("broker-restart", stack, tmp_path)
    rounds = result.rounds
    # each open during the outage retried, and its trace showed every attempt
    assert len(result.figures["open attempts"]) == rounds
    assert min(result.figures["open attempts"]) >= 2


async def test_etcd_restart(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("etcd-restart", stack, tmp_path)
    assert result.figures["TSO step-downs"] >= result.rounds
    assert result.figures["longest append stall (s)"] >= 1.0


async def test_tso_leader_killed(stack: StackInfo, tmp_path: Path) -> None:
    await _quick("tso-leader-kill", stack, tmp_path)


async def test_clock_jump_back(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("clock-jump-back", stack, tmp_path)
    assert all(s >= 10 for s in result.figures["clock jumps back (s)"])


async def test_network_faults(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("network-faults", stack, tmp_path)
    kinds = result.figures["faults by kind"]
    assert len(kinds) == 7  # every kind of fault, once
    # all node-broker traffic goes through the proxy: nothing completes while it is cut
    assert result.figures["acks through a blackholed broker link"] == [0]


async def test_an_ownerless_channel_on_a_stock_broker(
    stack: StackInfo, stock: PrivatePulsar, tmp_path: Path
) -> None:
    name = "stock-broker"
    result = await _run(name, SCENARIOS[name].quick_rounds, stack, tmp_path, stock=stock)
    assert result.ownerships == result.rounds + 1


async def test_a_consumer_checkpoints_across_owners_while_the_channel_is_truncated(
    stack: StackInfo, tmp_path: Path
) -> None:
    result = await _quick("checkpoints", stack, tmp_path)
    assert result.figures["truncation points seen"] >= 1
    assert result.figures["appends consumed after the first checkpoint"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_full_rounds(name: str, stack: StackInfo, tmp_path: Path) -> None:
    await _run(name, SCENARIOS[name].rounds, stack, tmp_path)


async def test_exactly_once_through_lost_answers_and_takeovers(
    stack: StackInfo, tmp_path: Path
) -> None:
    result = await _quick("exactly-once", stack, tmp_path)
    assert result.figures["duplicates found"] == 0
    assert result.figures["transactions committed (acknowledged)"] > 0
    assert result.figures["idempotent appends in the log"] > 0


async def test_batch_appends_through_lost_answers_and_takeovers(
    stack: StackInfo, tmp_path: Path
) -> None:
    result = await _quick("batch-appends", stack, tmp_path)
    assert result.figures["batches sent"] > result.rounds
    assert result.figures["messages in batches"] > result.figures["batches sent"]
    assert result.figures["single appends acknowledged"] > 0


async def test_faults_behind_and_of_a_native_front(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("native-front", stack, tmp_path)
    # every fault bit once, the front's own among them
    assert set(result.figures["faults"]) == {
        "lost-answers",
        "takeover",
        "kill-9-owner",
        "kill-front",
    }
    assert result.figures["frames they took"] > 0
    assert (
        result.figures["calls coalesced (fronts stopped gracefully)"]
        > (result.figures["frames they took"])
    )


async def test_cluster_kill_9_of_an_owner(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("cluster-kill-9", stack, tmp_path)
    # with the defaults (lease 5 s, grace 5 s): found by its refused port, not its lease
    assert result.figures["kill to first append, max (s)"] <= 5.0
    assert result.figures["kills found by a refused port"] == result.rounds == result.faults


async def test_cluster_pause_of_an_owner_moves_nothing(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("cluster-pause", stack, tmp_path)
    assert result.rounds == result.faults == 1
    assert result.figures["resume to first append, max (s)"] < 5.0


async def test_cluster_zombie_cut_off_from_etcd_only(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("cluster-zombie", stack, tmp_path)
    # the cut-off node kept taking appends after its lease was gone, and every one of
    # them the history checker found, in time-tick order with the new owner's
    assert result.figures["acks on the cut-off node after its lease expired"] > 0


async def test_cluster_node_losing_its_broker_and_a_node_with_a_wrong_one(
    stack: StackInfo, tmp_path: Path
) -> None:
    result = await _quick("cluster-broker-lost", stack, tmp_path)
    assert result.rounds == 2 and result.faults == 2
    assert result.figures["cut to first append elsewhere, max (s)"] > 0


async def test_cluster_etcd_restart_moves_no_channel(stack: StackInfo, tmp_path: Path) -> None:
    result = await _quick("cluster-etcd-restart", stack, tmp_path)
    assert result.figures["appends resumed after etcd, max (s)"] < 30


async def test_client_retries_through_lost_answers_and_kill_9(
    stack: StackInfo, tmp_path: Path
) -> None:
    """Issue 25: every answer the clients give holds, whatever their retry budget."""
    result = await _quick("client-retries", stack, tmp_path)
    answers = result.figures["answers [count, landed]"]
    acknowledged, landed = answers["acknowledged"]
    assert acknowledged == landed > 0
    assert answers["not-written"][1] == 0  # nothing answered "not written" is in the log
    assert result.figures["faults"] == {"lost-answers": 1, "kill-9-owner": 1}
    writers = result.figures["answers by writer [count, landed]"]
    assert all(told["acknowledged"][0] > 0 for told in writers.values()), writers
    assert result.figures["transactions told"].get("committed", 0) > 0
    coalesced, frames = result.figures["unary appends the NodeClients coalesced, in frames"]
    assert coalesced > frames > 0  # the shared clients' appends went in frames, and held


async def test_large_messages_through_kill_9_and_takeovers_between_chunks(
    stack: StackInfo, tmp_path: Path
) -> None:
    """Issue 32: no part of a cut chunked message is delivered, every acknowledged
    one is whole in the log and through Consume."""
    name = "large-messages"
    result = await _run(name, SCENARIOS[name].quick_rounds, stack, tmp_path, drop_topics=True)
    assert result.figures["faults"] == {"kill-9-owner": 1, "takeover": 1}
    assert result.figures["large appends acknowledged"] > 0
    assert (
        result.figures["large acknowledged and whole in the log"]
        == (result.figures["large appends acknowledged"])
    )
    assert (
        result.figures["messages delivered by Consume"]
        > result.figures["large appends acknowledged"]
    )


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)  # the cluster's start, and the scenario's own bound
async def test_cluster_brokers_moving_and_losing_topics_under_two_nodes(
    stack: StackInfo, pulsar_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """Every fault of the scenario once (its six quick rounds); slow: about two minutes.
    The scenario's topics are gone from the cluster afterwards."""
    before = await list_topics(pulsar_cluster.admin_url)
    result = await _quick("cluster-brokers", stack, tmp_path)
    seen = {key.split(":")[0] for key in result.figures if key.endswith("appends again")}
    assert seen == set(FAULTS), result.figures
    assert await list_topics(pulsar_cluster.admin_url) <= before


async def test_a_read_only_reader_on_a_node_that_never_owns_reads_through_kills_and_takeovers(
    stack: StackInfo, tmp_path: Path
) -> None:
    """Issue 45: a read-only read on any node outlives the owner's kills and takeovers,
    and hands over the log's messages at their ids, in order, once each."""
    result = await _quick("read-only-reader", stack, tmp_path)
    assert result.figures["faults by kind"] == {"kill-9-owner": 1, "takeover": 1}
    assert result.figures["messages handed to the read-only reader"] > result.acks_checked
    assert result.ownerships == result.rounds + 1
    # each owner wrote under a term of its own, above the last: the term rules had
    # something to check
    terms = result.figures["terms handed to the reader"]
    assert len(terms) == result.ownerships and 0 not in terms
