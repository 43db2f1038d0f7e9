"""A real multi-broker Pulsar moving and losing topics under two nodes' traffic.

Runs on the cluster profile (``streamwal stack up --profile cluster``, started here
if it is not up): two node processes each own a channel that clients write through
them. Each round applies one fault, in a shuffled order that covers all of them
every six rounds: a topic unload, a bundle moved to the other broker by name, an
unload of the whole namespace, a broker killed with SIGKILL and started again, a
bookie killed with SIGKILL and started again, and a takeover (the channel assigned
to the other node) while its topic moves between brokers. After each, appends must
go on; at the end the history checker reads both logs against every client's record.
The killed broker is the one serving the round's channel; the killed bookie is any of
the three (each holds a copy of two thirds of the entries). What the run started of
the cluster it stops at its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import StreamwalError
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import (
    channel_per_node,
    keep_all_flowing,
    move,
    tso_group,
)
from streamwal_lab.chaos.traffic import Traffic
from streamwal_lab.stack import Stack
from streamwal_lab.stack.bundles import MoveError, move_topic, owner_of
from streamwal_lab.stack.cluster import BOOKIE_PORTS, NAMESPACE, ClusterInfo

__all__ = ["BOUNDS_S", "FAULTS", "run"]

FAULTS = (
    "topic-unload",
    "bundle-move",
    "namespace-unload",
    "broker-kill",
    "bookie-kill",
    "takeover-during-move",
)

#: seconds from a fault until both channels append again, where the cluster promises a
#: bound: a move costs a reconnect; a takeover during a move costs the new owner's
#: open (a second one when the old writer reattached, docs/reliability.md) and the old
#: owner learns of its fence from the log within about a second (the fence watch), not by
#: its 30 s send timeout
BOUNDS_S = {"topic-unload": 5.0, "bundle-move": 5.0, "takeover-during-move": 10.0}


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("cluster-brokers")
    stack = Stack(profile="cluster", progress=env.say)
    stopped = [name for name in stack.services if stack.running(name) is None]
    cluster = await stack.up_cluster()
    topics: list[str] = []
    try:
        await _rounds(env, rounds, result, stack, cluster, topics)
    finally:
        try:
            # checked already; the nodes stop first, as one still serving a topic would
            # create it again after the delete
            await env.stop_nodes()
            admin = PulsarAdmin(cluster.admin_url)
            for topic in topics:
                with contextlib.suppress(Exception):
                    await admin.delete(f"{PulsarAdmin.topic_path(topic)}?force=true")
        finally:
            if stopped:  # what this run started of the cluster goes with it
                await stack.down(stopped)
    return result


async def _rounds(
    env: ChaosEnv,
    rounds: int,
    result: ScenarioResult,
    stack: Stack,
    cluster: ClusterInfo,
    topics: list[str],
) -> None:
    admin = PulsarAdmin(cluster.admin_url)
    nodes = await tso_group(
        env, 2, pulsar_url=cluster.pulsar_url, sections={"pulsar": {"admin_url": cluster.admin_url}}
    )
    home, traffic = await channel_per_node(env, result, nodes, "brokers")
    topics.extend(PulsarConfig().topic(t.channel) for t in traffic)
    addresses = [n.address for n in nodes]
    order: list[str] = []
    for round_ in range(rounds):
        if not order:
            order = list(FAULTS)
            env.rng.shuffle(order)
        fault = order.pop(0)
        target = env.rng.choice(traffic)
        topic = PulsarConfig().topic(target.channel)
        label = f"round {round_} ({fault})"
        await keep_all_flowing(result, traffic, home, f"{label}, before")
        await asyncio.sleep(env.rng.uniform(0.2, 1.0))
        env.say(f"  {label} on {target.channel}")
        moved_by = time.monotonic()
        try:
            if fault == "topic-unload":
                await admin.put(f"{PulsarAdmin.topic_path(topic)}/unload")
            elif fault == "bundle-move":
                await move_topic(admin, topic, _other(cluster, await owner_of(admin, topic)))
            elif fault == "namespace-unload":
                await admin.put(f"namespaces/{NAMESPACE}/unload")
            elif fault == "broker-kill":  # the broker serving the channel
                owner = await owner_of(admin, topic)
                index = cluster.broker_ids.index(owner) + 1
                await _kill_and_restart(env, stack, f"broker-{index}")
            elif fault == "bookie-kill":
                await _kill_and_restart(
                    env, stack, f"bookie-{env.rng.randint(1, len(BOOKIE_PORTS))}"
                )
            else:
                await _takeover_during_move(result, admin, cluster, target, home, addresses, label)
        except (MoveError, StreamwalError) as exc:
            result.problems.append(f"{label}: the fault itself failed: {exc}")
        result.faults += 1
        await keep_all_flowing(result, traffic, home, f"{label}, after", 30)
        took = time.monotonic() - moved_by
        result.figures.setdefault(f"{fault}: s to appends again", []).append(round(took, 1))
        bound = BOUNDS_S.get(fault)
        if bound is not None and took > bound:
            result.problems.append(
                f"{label}: both channels appended again only after {took:.1f}s (bound {bound:g}s)"
            )
        result.rounds += 1
    await env.check(result, traffic, pulsar_url=cluster.pulsar_url)


def _other(cluster: ClusterInfo, broker: str) -> str:
    return next(b for b in cluster.broker_ids if b != broker)


async def _kill_and_restart(env: ChaosEnv, stack: Stack, service: str) -> None:
    """SIGKILL ``service`` of the cluster profile, then start it again on its data."""
    entry = stack.running(service)
    if entry is None:
        raise RuntimeError(f"the cluster's {service} is not running")
    os.kill(entry.pid, signal.SIGKILL)
    await asyncio.sleep(env.rng.uniform(1.0, 3.0))
    await stack.up_cluster([service])


async def _takeover_during_move(
    result: ScenarioResult,
    admin: PulsarAdmin,
    cluster: ClusterInfo,
    target: Traffic,
    home: dict[str, str],
    addresses: list[str],
    label: str,
) -> None:
    """Assign the channel to the other node while its topic moves to the other broker."""
    topic = PulsarConfig().topic(target.channel)
    moving = asyncio.create_task(
        move_topic(admin, topic, _other(cluster, await owner_of(admin, topic)))
    )
    other = next(a for a in addresses if a != home[target.channel])
    try:
        if await move(result, target, other, label):
            home[target.channel] = other
    finally:
        await moving
