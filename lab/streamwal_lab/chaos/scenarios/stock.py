"""A broker with Pulsar's own policies: a channel left without an owner keeps its log.

A private broker runs with Pulsar's defaults: no retention, and topics with no
subscription deleted once inactive (checked every 2 s, after 5 s: the one change).
The scenario writes in a namespace of its own (the broker may be one a caller lends,
see :attr:`ChaosEnv.stock_pulsar`), with deduplication enabled, as docs/deploy.md asks;
nothing else is set. Node 1 runs the oracle; the channel lives on node 2 or 3. Each
round SIGKILLs the channel's owner, leaves the channel without an owner past the
inactivity window, then assigns it to the other node. A plain topic written beside it
once at the start must be gone after the first wait (else the broker did not delete
anything and the scenario proves nothing); the channel's topic must still be there each
time, and the checker must find every acknowledged append in the log.
"""

from __future__ import annotations

import asyncio

from pulsar import asyncio as pulsar_asyncio

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.adaptors.pulsar.opener import client_logger
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import hand_over, keep_flowing, owned_traffic, tso_group
from streamwal_lab.stack.pulsar import STOCK_INACTIVE_CHECK

__all__ = ["run"]

#: the inactivity window plus two of the broker's checks
OWNERLESS_S = (
    STOCK_INACTIVE_CHECK["brokerDeleteInactiveTopicsMaxInactiveDurationSeconds"]
    + 2 * STOCK_INACTIVE_CHECK["brokerDeleteInactiveTopicsFrequencySeconds"]
)


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("stock-broker")
    pulsar = await env.private_pulsar(stock=True)
    admin = PulsarAdmin(pulsar.admin_url)
    namespace = env.name("stock-ns")
    await admin.put(f"namespaces/public/{namespace}")
    await admin.post(f"namespaces/public/{namespace}/deduplication", True)
    nodes = await tso_group(
        env,
        3,
        pulsar_url=pulsar.url,
        sections={"pulsar": {"admin_url": pulsar.admin_url, "namespace": namespace}},
    )
    movers = nodes[1:]
    channel = env.name("stock")
    topic = PulsarConfig(service_url=pulsar.url, namespace=namespace).topic(channel)
    control = await _plain_topic(
        pulsar.url, f"persistent://public/{namespace}/{env.name('stock-control')}"
    )
    owner = 0
    traffic = await owned_traffic(env, result, movers, channel, workers=2)
    for round_ in range(rounds):
        await keep_flowing(result, traffic, movers[owner].address, f"round {round_}, before")
        victim, survivor = movers[owner], movers[1 - owner]
        await victim.kill()
        result.faults += 1
        await asyncio.sleep(OWNERLESS_S)
        topics = set(await admin.get(f"persistent/public/{namespace}") or [])
        if round_ == 0:
            result.expect(control not in topics, "the broker kept an inactive plain topic")
        result.expect(topic in topics, f"round {round_}: the channel's topic was deleted")
        await hand_over(result, traffic, survivor, f"round {round_}: reopen on")
        await keep_flowing(result, traffic, survivor.address, f"round {round_}, after")
        await victim.start()
        owner = 1 - owner
        result.rounds += 1
    await env.check(result, [traffic], pulsar_url=pulsar.url, namespace=namespace)
    result.figures["ownerless per round (s)"] = OWNERLESS_S
    return result


async def _plain_topic(url: str, topic: str) -> str:
    """A topic a plain producer wrote once and left: the broker's to delete."""
    client = pulsar_asyncio.Client(url, logger=client_logger())
    try:
        producer = await client.create_producer(topic)
        await producer.send(b"control")
        await producer.close()
    finally:
        await client.close()
    return topic
