"""The fault scenarios ``streamwal chaos`` runs, with their round counts.

``rounds`` is what the command runs by default (what ``docs/reliability.md`` reports);
``quick_rounds`` is what the default test run uses; ``seconds_per_round`` bounds a
run (with a fixed allowance for starting nodes and brokers) so it always ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios import (
    batches,
    broker,
    brokers,
    checkpoints,
    client_retries,
    clock,
    cluster,
    etcd,
    exactly_once,
    front,
    kill,
    large,
    network,
    read_only,
    stock,
    takeover,
    tso_leader,
)

__all__ = ["SCENARIOS", "Scenario"]


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[ChaosEnv, int], Awaitable[ScenarioResult]]
    rounds: int
    quick_rounds: int
    seconds_per_round: float
    summary: str
    base_seconds: float = 120.0
    """Allowance for starting nodes and brokers, on top of the rounds."""

    def time_limit(self, rounds: int) -> float:
        return self.base_seconds + self.seconds_per_round * rounds


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "takeover-race",
            takeover.run,
            50,
            10,
            5.0,
            "4 nodes take one channel over in random order while clients write",
        ),
        Scenario(
            "kill-9-owner",
            kill.run,
            10,
            2,
            20.0,
            "SIGKILL of the owning node during appends; another node takes over",
        ),
        Scenario(
            "broker-restart",
            broker.run,
            3,
            1,
            120.0,
            "private broker restarted during appends and during a first time tick",
        ),
        Scenario(
            "etcd-restart",
            etcd.run,
            4,
            1,
            40.0,
            "private etcd of the TSO killed for longer than the lease, then restarted",
        ),
        Scenario(
            "tso-leader-kill",
            tso_leader.run,
            4,
            1,
            40.0,
            "SIGKILL of the node whose in-process TSO leads; the other candidate leads",
        ),
        Scenario(
            "clock-jump-back",
            clock.run,
            3,
            1,
            40.0,
            "TSO leader's clock jumps back; a candidate with its clock behind takes over",
        ),
        Scenario(
            "network-faults",
            network.run,
            14,
            7,
            40.0,
            "latency, resets, refusals, blackholes on node-broker and node-etcd links",
        ),
        Scenario(
            "checkpoints",
            checkpoints.run,
            6,
            2,
            25.0,
            "a consumer checkpoints and resumes across killed owners while the channel "
            "is truncated up to its checkpoint",
        ),
        Scenario(
            "cluster-brokers",
            brokers.run,
            12,
            6,
            40.0,
            "two brokers and three bookies (the cluster profile): topic and namespace "
            "unloads, bundle moves, kill -9 of a broker or a bookie, a takeover while "
            "the topic moves",
            base_seconds=150.0,
        ),
        Scenario(
            "native-front",
            front.run,
            8,
            4,
            25.0,
            "nodes behind their native fronts (node.front: native), plain and idempotent "
            "writers: lost answers, takeovers, SIGKILL of the owner, SIGKILL of its front",
        ),
        Scenario(
            "stock-broker",
            stock.run,
            3,
            1,
            60.0,
            "broker with Pulsar's default policies; the owner killed, the channel left "
            "ownerless past the inactive-topic window, then reopened",
        ),
        Scenario(
            "exactly-once",
            exactly_once.run,
            12,
            3,
            15.0,
            "idempotent retries and transactions through lost answers, takeovers and "
            "kill -9 of the owner: no duplicate, no partial or uncommitted transaction",
        ),
        Scenario(
            "batch-appends",
            batches.run,
            12,
            3,
            15.0,
            "batch appends and single appends through lost answers, takeovers and kill -9 "
            "of the owner: each message as its own result says, a batch's landed messages "
            "together and in order",
        ),
        Scenario(
            "client-retries",
            client_retries.run,
            10,
            2,
            20.0,
            "ClusterClient (retry budgets down to one try) and NodeClient (0 and 2 retries): "
            "unary, stream, batch appends and transactions through lost answers and kill -9 "
            "of the owner; every acknowledgement in the log once at its position, nothing "
            "answered not written there",
        ),
        Scenario(
            "read-only-reader",
            read_only.run,
            6,
            2,
            20.0,
            "a read-only reader on a node that never owns the channel reads it whole "
            "through kill -9 of the owner and takeovers: one stream, the log's messages "
            "at their ids, in order, once, every acknowledged append among them",
        ),
        Scenario(
            "large-messages",
            large.run,
            8,
            2,
            30.0,
            "messages of 6-12 MiB (chunked) beside small ones; kill -9 of the owner and "
            "takeovers the moment a message's first chunk lands: no part of a cut message "
            "delivered, every acknowledged one whole in the log and through Consume",
        ),
        Scenario(
            "cluster-kill-9",
            cluster.run_kill,
            6,
            2,
            25.0,
            "self-managing cluster, default settings: SIGKILL of a channel owner under "
            "writes through ClusterClient; its refused port gets it declared lost and its "
            "channels take writes elsewhere within 5 s",
        ),
        Scenario(
            "cluster-pause",
            cluster.run_pause,
            4,
            1,
            25.0,
            "self-managing cluster, default settings: a channel owner SIGSTOPped for 3 s "
            "and resumed under writes: nothing moves, no node is taken for dead",
        ),
        Scenario(
            "cluster-zombie",
            cluster.run_zombie,
            3,
            1,
            25.0,
            "self-managing cluster, default settings: one node's etcd link blackholed "
            "(broker link up, port open: no evidence of death); it keeps appending until "
            "its lease and the grace run out and the new owner fences it",
        ),
        Scenario(
            "cluster-broker-lost",
            cluster.run_broker_lost,
            4,
            2,
            40.0,
            "self-managing cluster: one node's broker link cut (refused, blackholed) under "
            "writes, and a node with a wrong broker address: the cut node turns not ready, "
            "its channels serve on the others within the bound, the wrong one gets none",
        ),
        Scenario(
            "cluster-etcd-restart",
            cluster.run_etcd_restart,
            3,
            1,
            30.0,
            "self-managing cluster on a private etcd restarted within the lease: no channel moves",
        ),
    )
}
