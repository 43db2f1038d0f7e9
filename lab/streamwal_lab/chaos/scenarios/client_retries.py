"""The clients' own retries through lost answers and kill -9: every answer holds.

What it guards against: a client that judges an append by its last try
answers "not written" for an append whose first try landed (answer lost) and whose
retry found the node unreachable; it hands the number back, the next append goes out
with it and is acknowledged at the first one's position, and never written. This
scenario drives the real clients, with the retry budgets where that bites (down to a
single try), and holds every answer they give to the log.

Three nodes (node 1 runs the oracle and never owns the channel); the channel lives on
node 2 or 3, each behind a fault proxy every client goes through. The scenario plays
the coordinator: it assigns the channel and publishes the owner in etcd
(``assign/<channel>`` and each node's record, at its proxy's address) for
:class:`~streamwal.cluster.ClusterClient`, and routes the
:class:`~streamwal.node.client.NodeClient` writers itself. Writers
(:mod:`streamwal_lab.chaos.client_traffic`): ClusterClient unary appends with
budgets of 0 s (one try), 0.05 s and 5 s, its ``produce_batch`` and
``produce_stream``, and its transactions (some rolled back, some left idle past a
short keepalive: expired); NodeClient unary appends with 0 and 2 retries, alone and
six writers sharing one client (which coalesces their appends into frames),
``produce_batch``, and ``open_stream`` writers: one coalescing what it has in flight
into frames (the default), four sharing one client (their streams share one call)
and one sending a frame per append. Each round, one fault: the owner's proxy drops
every answer for a moment and then cuts its connections (the requests reached
the node, the answers are lost), or the owner is killed with SIGKILL and the other
node takes over.

The checker then holds each answer to the log: every acknowledged append there once,
at its position (``ack-*``, ``ack-position-shared``); none answered "not written"
there (``not-written-persisted``); every acknowledged commit there whole and
delivered once, nothing of a transaction told rolled back or expired committed or
delivered (the ``txn-*`` rules, against a reader of the whole vchannel through
``ClusterClient.consume``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId
from streamwal.cluster.client import ClusterClient
from streamwal.cluster.records import Assignment, ClusterKeys, NodeRecord, encode, now_ms
from streamwal.cluster.store import ClusterStore
from streamwal.errors import DecodeError
from streamwal.verify.acks import digest
from streamwal.verify.cli import read_topic
from streamwal.verify.history import check_history
from streamwal.wal.backend import BackendMessage, DeliveryPolicy
from streamwal.wal.message import MessageType, decode_entry
from streamwal_lab.chaos.client_traffic import (
    ACKNOWLEDGED,
    TXN_VCHANNEL,
    ClientWriters,
    Records,
    Route,
)
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.nodes import NodeProcess
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import assign, tso_group
from streamwal_lab.faultproxy import FaultProxy

__all__ = ["BUDGETS", "FAULTS", "run"]

FAULTS = ("lost-answers", "kill-9-owner")
BUDGETS = (0.0, 0.05, 5.0)
"""``retry_for_s`` of the ClusterClient unary writers: one try, about one, plenty."""
SHARED_WRITERS = 6
"""NodeClient unary writers sharing one client (its coalescer's frames), per budget."""
SHARED_STREAMS = 4
"""``open_stream`` writers sharing one client (their streams share one call)."""


class _Coordinator:
    """Assigns the channel to one of two nodes and publishes where clients reach it."""

    def __init__(
        self,
        env: ChaosEnv,
        result: ScenarioResult,
        movers: list[NodeProcess],
        proxies: list[FaultProxy],
        channel: str,
    ) -> None:
        self.prefix = "/" + env.name("routes")  # deleted with the run's other keys
        self.keys = ClusterKeys(self.prefix)
        self.store = ClusterStore([env.etcd_endpoint], unavailable_after_s=10.0)
        self._result = result
        self.movers = movers
        self.proxies = proxies
        self.channel = channel
        self.owner = 0
        self.route = Route(proxies[0].url_host)
        self._term = 0

    async def start(self) -> None:
        await self.store.start()
        for node, proxy in zip(self.movers, self.proxies, strict=True):
            record = NodeRecord(node.node_id, proxy.url_host, "chaos", now_ms())
            await self.store.put(self.keys.node(node.node_id), encode(record))
        await self.assign_to(0, "first assign")

    async def assign_to(self, index: int, label: str) -> None:
        """Open the channel on ``movers[index]`` (fencing the other), then publish it."""
        answer = await assign(self.movers[index].address, self.channel)
        if isinstance(answer, grpc.StatusCode):
            self._result.problems.append(f"{label}: assign: {answer.name}")
        self._term += 1
        previous = self.movers[self.owner].node_id if self._term > 1 else None
        record = Assignment(
            self.channel, self.movers[index].node_id, self._term, "chaos", now_ms(), previous
        )
        await self.store.put(self.keys.assign + self.channel, encode(record))
        self.owner = index
        self.route.address = self.proxies[index].url_host

    async def inject(self, round_: int, env: ChaosEnv) -> str:
        fault = FAULTS[round_ % len(FAULTS)]
        if fault == "lost-answers":
            proxy = self.proxies[self.owner]
            proxy.drop_answers = True
            await asyncio.sleep(env.rng.uniform(0.05, 0.3))
            proxy.reset()  # the calls whose answers were dropped fail, outcome unknown
            proxy.drop_answers = False
        else:
            victim = self.movers[self.owner]
            await victim.kill()
            await self.assign_to(1 - self.owner, f"round {round_}: takeover")
            await victim.start()
        return fault

    async def close(self) -> None:
        await self.store.close()


def _writers(
    env: ChaosEnv,
    channel: str,
    records: Records,
    route: Route,
    via: list[str],
    clients: dict[float, ClusterClient],
) -> ClientWriters:
    writers = ClientWriters(channel, records, rng=env.rng, route=route, node_addresses=via)
    for budget in BUDGETS:
        name = f"cluster produce, retry_for_s={budget:g}"
        writers.start(name, writers.cluster_unary(name, clients[budget]))
    short = clients[0.05]
    name = "cluster produce_batch, retry_for_s=0.05"
    writers.start(name, writers.cluster_batch(name, short, (1, 16)))
    name = "cluster produce_stream, retry_for_s=0.05"
    writers.start(name, writers.cluster_stream(name, short, (4, 24), in_flight=8))
    for budget in (0.05, 5.0):
        name = f"cluster transactions, retry_for_s={budget:g}"
        txns = writers.cluster_txns(name, clients[budget], 3, expire_every=6, rollback_every=4)
        writers.start(name, txns)
    for retries in (0, 2):
        name = f"node produce, retries={retries}"
        writers.start(name, writers.node_unary(name, retries))
        name = f"node produce, one client, retries={retries}"  # coalesced into frames
        for i, writer in enumerate(writers.node_unary_shared(name, retries, SHARED_WRITERS)):
            writers.start(f"{name} #{i}", writer)
    name = "node produce_batch, retries=0"
    writers.start(name, writers.node_batch(name, 0, (1, 16)))
    name = "node open_stream"  # coalescing: the appends in flight go as one frame
    writers.start(name, writers.node_stream(name, in_flight=8))
    name = "node open_stream, one client"  # four streams sharing one call
    for i, writer in enumerate(writers.node_streams_shared(name, 4, SHARED_STREAMS)):
        writers.start(f"{name} #{i}", writer)
    name = "node open_stream, a frame per append"
    writers.start(name, writers.node_stream(name, in_flight=4, coalesce=False))
    return writers


async def _delivered(client: ClusterClient, channel: str, timeout: float = 60.0) -> list[bytes]:
    """The ids a reader of the whole transaction vchannel gets, up to a sentinel
    appended now (read through the client, which follows the owner)."""
    sentinel = f"{channel}/txn-sentinel".encode()
    await client.produce(channel, sentinel, vchannel=TXN_VCHANNEL)
    ids: list[bytes] = []
    async with asyncio.timeout(timeout):
        async for message in client.consume(channel, DeliveryPolicy.all(), vchannel=TXN_VCHANNEL):
            ids.append(message.message_id)
            if message.payload == sentinel:
                return ids
    raise RuntimeError(f"the read of {channel!r} ended before its sentinel")


def _in_log(entries: list[BackendMessage]) -> set[str]:
    digests: set[str] = set()
    for raw in entries:
        with contextlib.suppress(DecodeError):
            for msg in decode_entry(raw, PulsarMessageId.from_bytes):
                if not (msg.is_wal_record and msg.type is not MessageType.TIME_TICK):
                    digests.add(digest(msg.payload))  # not a transaction marker
    return digests


def _figures(records: Records, landed: set[str]) -> dict[str, Any]:
    """Per writer, how many appends got each answer and how many of those landed."""
    table: dict[str, Any] = {}
    for writer, told in sorted(records.told.items()):
        table[writer] = {
            answer: [len(digests), sum(1 for d in digests if d in landed)]
            for answer, digests in told.items()
        }
    return table


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("client-retries")
    nodes = await tso_group(env, 3)
    movers = nodes[1:]
    channel = env.name("retries")
    records = Records()
    done: dict[str, int] = {}
    async with contextlib.AsyncExitStack() as stack:
        proxies = [await stack.enter_async_context(FaultProxy(n.port)) for n in movers]
        coordinator = _Coordinator(env, result, movers, proxies, channel)
        stack.push_async_callback(coordinator.close)
        await coordinator.start()
        clients: dict[float, ClusterClient] = {}
        for budget in (*BUDGETS, 30.0):
            client = ClusterClient(
                [env.etcd_endpoint],
                key_prefix=coordinator.prefix,
                retry_for_s=budget,
                timeout=5.0,
                tracing=False,
            )
            clients[budget] = await stack.enter_async_context(client)
        via = [p.url_host for p in proxies]
        writers = _writers(env, channel, records, coordinator.route, via, clients)
        stack.push_async_callback(writers.stop)
        for round_ in range(rounds):
            flowing = await records.wait_for_acks(100, timeout=30)
            result.expect(flowing, f"round {round_}: appends did not flow before the fault")
            await asyncio.sleep(env.rng.uniform(0.2, 0.8))
            fault = await coordinator.inject(round_, env)
            done[fault] = done.get(fault, 0) + 1
            result.faults += 1
            result.rounds += 1
        resumed = await records.wait_for_acks(20, timeout=30)
        result.expect(resumed, "appends did not resume after the last fault")
        await writers.stop()
        delivered = await _delivered(clients[30.0], channel)
    config = PulsarConfig(service_url=env.pulsar_url)
    entries = await read_topic(env.pulsar_url, config.topic(channel))
    report = check_history(
        entries,
        PulsarMessageId.from_bytes,
        records.acks,
        records.failures,
        delivered=delivered,
        batches=records.batches,
        txns=records.txns,
    )
    result.absorb(channel, report)
    result.expect(not records.unexpected, f"unexpected answers: {records.unexpected[:3]}")
    result.expect(bool(records.acks), "no append was acknowledged")
    committed = report.txn_outcomes.get("committed", 0)
    result.expect(committed > 0, "no transaction was committed")
    frames, coalesced = writers.coalesced()
    result.expect(frames > 0, "the shared NodeClients coalesced no appends into frames")
    by_writer = _figures(records, _in_log(entries))
    totals = {
        answer: [sum(w[answer][i] for w in by_writer.values()) for i in (0, 1)]
        for answer in (ACKNOWLEDGED, "not-written", "unknown")
    }
    result.figures.update(
        {
            "faults": done,
            "answers [count, landed]": totals,
            "answers by writer [count, landed]": by_writer,
            "transactions told": dict(report.txn_outcomes),
            "of them committed in the log": dict(report.txn_outcomes_committed),
            "transactions left idle to expire": writers.txn_sleeps,
            "unary appends the NodeClients coalesced, in frames": [coalesced, frames],
            "codes": dict(records.codes),
        }
    )
    return result
