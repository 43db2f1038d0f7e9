"""Helpers the scenarios share: starting node groups, assigning, timing, the TSO leader."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import etcd3
import grpc

from streamwal.errors import DecodeError
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.server.front import FRONT_BINARY
from streamwal.tso.store import LeaderRecord
from streamwal_lab.chaos.auth import chaos_channel
from streamwal_lab.chaos.env import ChaosEnv, node_settings
from streamwal_lab.chaos.nodes import NodeProcess
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.traffic import Traffic
from streamwal_lab.faultproxy import FaultProxy

__all__ = [
    "KNOWN_FAULTS",
    "ROTATING_FAULTS",
    "RotatingFaults",
    "assign",
    "channel_per_node",
    "hand_over",
    "keep_all_flowing",
    "keep_flowing",
    "keep_flowing_via",
    "leader_address",
    "move",
    "owned_traffic",
    "start_all",
    "tso_group",
    "wait_for_leader",
]


async def start_all(nodes: Sequence[NodeProcess]) -> None:
    await asyncio.gather(*(n.start() for n in nodes))


async def tso_group(
    env: ChaosEnv,
    count: int,
    *,
    pulsar_url: str | None = None,
    etcd_endpoint: str | None = None,
    prefix: str | None = None,
    batch_size: int = 1000,
    sections: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[NodeProcess]:
    """Node 1 runs the oracle in-process; nodes 2..count take timestamps from it.

    ``batch_size``: timestamps an allocator fetches at once (small: a TSO outage
    stops appends sooner). ``sections``: more settings for every node.
    """
    pulsar = pulsar_url or env.pulsar_url
    etcd = etcd_endpoint or env.etcd_endpoint
    key_prefix = prefix or "/" + env.name("tso")
    tso = {"mode": "in-process", "key_prefix": key_prefix, "batch_size": batch_size}
    more = sections or {}
    oracle = env.node(1, node_settings(pulsar, etcd, tso, **more))
    await oracle.start()
    # the oracle's prefix on every node: the channels' terms live under it
    remote = {
        "mode": "remote",
        "remote_addresses": [oracle.address],
        "batch_size": batch_size,
        "key_prefix": key_prefix,
    }
    others = [env.node(i, node_settings(pulsar, etcd, remote, **more)) for i in range(2, count + 1)]
    await start_all(others)
    return [oracle, *others]


async def assign(
    address: str, pchannel: str, timeout: float = 60.0
) -> pb.AssignChannelResponse | grpc.StatusCode:
    """``AssignChannel`` on the node at ``address``: its answer, or the status code.

    Waits for the node to be reachable (within ``timeout``), on a channel of its own:
    gRPC shares connections to one address between channels, and one that saw the node
    down keeps failing new calls at once until its reconnect backoff ends, even after
    the node is back.
    """
    async with chaos_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        stub = pb_grpc.StreamingNodeStub(channel)
        try:
            response: pb.AssignChannelResponse = await stub.AssignChannel(
                pb.AssignChannelRequest(pchannel=pchannel),
                timeout=timeout,
                wait_for_ready=True,
            )
            return response
        except grpc.aio.AioRpcError as exc:
            return exc.code()


async def owned_traffic(
    env: ChaosEnv,
    result: ScenarioResult,
    movers: Sequence[NodeProcess],
    channel: str,
    *,
    workers: int,
) -> Traffic:
    """``channel`` assigned to the first of ``movers``, and started traffic through
    all of them that prefers it: where the scenarios that move one channel between
    nodes begin."""
    answer = await assign(movers[0].address, channel)
    result.expect(not isinstance(answer, grpc.StatusCode), f"first assign failed: {answer}")
    traffic = env.traffic(channel, [n.address for n in movers], workers=workers)
    traffic.prefer(movers[0].address)
    await traffic.start()
    return traffic


async def hand_over(
    result: ScenarioResult, traffic: Traffic, survivor: NodeProcess, label: str
) -> float:
    """``survivor`` takes ``traffic``'s channel over (its old owner is gone) and the
    traffic turns to it; a refused assign is a problem (``label``: the round and what
    the assign stands for). Returns the seconds the assign took."""
    started = time.monotonic()
    answer = await assign(survivor.address, traffic.channel)
    took = time.monotonic() - started
    if isinstance(answer, grpc.StatusCode):
        result.problems.append(f"{label} {survivor.address}: {answer}")
    traffic.prefer(survivor.address)
    return took


async def channel_per_node(
    env: ChaosEnv,
    result: ScenarioResult,
    nodes: Sequence[NodeProcess],
    tag: str,
    *,
    workers: int = 2,
) -> tuple[dict[str, str], list[Traffic]]:
    """One channel per node, assigned to it, with traffic that writes through it first.

    Returns each channel's home (the address it was assigned to) and the started
    traffic. Channels are named ``<tag>-<node id>``.
    """
    addresses = [n.address for n in nodes]
    home: dict[str, str] = {}
    traffic: list[Traffic] = []
    for node in nodes:
        channel = env.name(f"{tag}-{node.node_id}")
        answer = await assign(node.address, channel)
        result.expect(not isinstance(answer, grpc.StatusCode), f"assign {channel}: {answer}")
        t = env.traffic(channel, addresses, workers=workers)
        t.prefer(node.address)
        home[channel] = node.address
        await t.start()
        traffic.append(t)
    return home, traffic


def leader_address(etcd_endpoint: str, key_prefix: str) -> str | None:
    """The address the TSO leader key names (blocking: call through ``to_thread``)."""
    host, _, port = etcd_endpoint.rpartition(":")
    client = etcd3.client(host, int(port), timeout=2)
    try:
        raw, _ = client.get(f"{key_prefix}/tso/leader")
    finally:
        client.close()
    if raw is None:
        return None
    with contextlib.suppress(DecodeError):
        return LeaderRecord.decode(raw).address or None
    return None


async def keep_flowing(
    result: ScenarioResult, traffic: Traffic, home: str, label: str, wait: float = 20.0
) -> None:
    """Expect appends on ``traffic``'s channel; if none come within ``wait`` seconds,
    assign the channel to ``home`` again and expect them then.

    That is what a coordinator does with a channel a node reports fenced in
    ``ListChannels``: a writer that lost its producer registration on the broker (a
    broker restart, a timed-out reconnect) is refused as fenced, safely, and stops.
    """
    if await traffic.wait_for_acks(5, timeout=wait):
        return
    key = "channels assigned again"
    result.figures[key] = result.figures.get(key, 0) + 1
    channel = traffic.channel
    answer = await assign(home, channel, timeout=90)
    ok = not isinstance(answer, grpc.StatusCode)
    result.expect(ok, f"{label}: assigning {channel} again: {answer}")
    if ok:
        traffic.prefer(home)
    resumed = await traffic.wait_for_acks(5, timeout=60)
    result.expect(resumed, f"{label}: {channel}: appends did not resume")


async def keep_all_flowing(
    result: ScenarioResult,
    traffic: Sequence[Traffic],
    home: Mapping[str, str],
    label: str,
    wait: float = 20.0,
) -> None:
    """:func:`keep_flowing` on each channel of :func:`channel_per_node`, in turn, each
    assigned again to its ``home`` if its appends stopped."""
    for t in traffic:
        await keep_flowing(result, t, home[t.channel], label, wait)


async def keep_flowing_via(
    result: ScenarioResult, traffic: Traffic, owner: str, via: str, label: str
) -> None:
    """:func:`keep_flowing`, with clients that reach the owner through its proxy
    (``via``) while the channel is assigned at the owner's own address."""
    if await traffic.wait_for_acks(5, timeout=20):
        return
    answer = await assign(owner, traffic.channel, timeout=90)
    result.expect(not isinstance(answer, grpc.StatusCode), f"{label}: reassign: {answer}")
    traffic.prefer(via)
    resumed = await traffic.wait_for_acks(5, timeout=60)
    result.expect(resumed, f"{label}: appends did not resume")


async def move(result: ScenarioResult, traffic: Traffic, target: str, label: str) -> bool:
    """Assign ``traffic``'s channel to ``target`` (trying twice, as a coordinator would)."""
    for attempt in (1, 2):
        answer = await assign(target, traffic.channel, timeout=60)
        if not isinstance(answer, grpc.StatusCode):
            traffic.prefer(target)
            return True
        if attempt == 2:
            result.problems.append(f"{label}: moving {traffic.channel}: {answer.name}")
    return False


async def wait_for_leader(
    etcd_endpoint: str, key_prefix: str, candidates: list[str], timeout: float = 20.0
) -> str | None:
    """Poll the TSO leader key until it names one of ``candidates``; ``None`` if not in time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        named = await asyncio.to_thread(leader_address, etcd_endpoint, key_prefix)
        if named in candidates:
            return named
        if loop.time() > deadline:
            return None
        await asyncio.sleep(0.2)


#: the faults :class:`RotatingFaults` cycles through by default, one a round
ROTATING_FAULTS = ("lost-answers", "takeover", "kill-9-owner")
#: every fault it knows: the default ones and SIGKILL of the owner's native front
KNOWN_FAULTS = (*ROTATING_FAULTS, "kill-front")


async def _logged(node: NodeProcess, text: str, before: int, timeout: float) -> bool:
    """Whether ``node``'s log says ``text`` more than the ``before`` times it had said
    it (its log runs on across restarts) within ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while node.log_text().count(text) <= before:
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


class _Client(Protocol):
    def prefer(self, address: str) -> None: ...


class RotatingFaults:
    """A channel that two nodes own in turn, each behind the fault proxy its clients go
    through; each round one fault of ``faults`` (default :data:`ROTATING_FAULTS`), in
    turn: every client connection cut at once (answers in flight lost), a takeover by
    the other node, SIGKILL of the owner and a takeover (the killed node then
    restarts), or (``kill-front``, nodes with ``node.front: native``) SIGKILL of the
    owner's front alone and a takeover (the node, unreachable, then restarts)."""

    def __init__(
        self,
        result: ScenarioResult,
        movers: Sequence[NodeProcess],
        proxies: Sequence[FaultProxy],
        channel: str,
        faults: Sequence[str] = ROTATING_FAULTS,
    ) -> None:
        unknown = sorted(set(faults) - set(KNOWN_FAULTS))
        if unknown or not faults:
            raise ValueError(f"faults {unknown or '(none)'}; known: {', '.join(KNOWN_FAULTS)}")
        self._result = result
        self.movers = list(movers)
        self._proxies = list(proxies)
        self._faults = tuple(faults)
        self.channel = channel
        self.via = [p.url_host for p in proxies]
        self.owner = 0
        self.done: dict[str, int] = {}

    @classmethod
    async def behind_proxies(
        cls,
        stack: contextlib.AsyncExitStack,
        env: ChaosEnv,
        result: ScenarioResult,
        what: str,
        *,
        faults: Sequence[str] = ROTATING_FAULTS,
        sections: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> RotatingFaults:
        """A :func:`tso_group` of three (``sections``: more settings for every node)
        whose nodes 2 and 3 own the channel ``env.name(what)`` in turn, each behind a
        fault proxy of its own (closed with ``stack``); the channel assigned to node 2."""
        movers = (await tso_group(env, 3, sections=sections))[1:]
        proxies = [await stack.enter_async_context(FaultProxy(n.port)) for n in movers]
        rotating = cls(result, movers, proxies, env.name(what), faults)
        await rotating.assign_first()
        return rotating

    @property
    def owner_address(self) -> str:
        """The address of the node that owns the channel now (not its proxy's)."""
        return self.movers[self.owner].address

    async def run_rounds(
        self, rng: random.Random, rounds: int, traffic: Traffic, clients: Sequence[_Client]
    ) -> None:
        """``rounds`` rounds of: appends on ``traffic`` flowing, a short random pause,
        the round's fault (``clients`` follow the owner); then appends flowing again."""
        for round_ in range(rounds):
            await self.keep_flowing(traffic, f"round {round_}")
            await asyncio.sleep(rng.uniform(0.1, 0.4))
            await self.inject(round_, clients)
            self._result.rounds += 1
        await self.keep_flowing(traffic, f"round {rounds}")

    async def assign_first(self) -> None:
        answer = await assign(self.movers[self.owner].address, self.channel)
        self._result.expect(
            not isinstance(answer, grpc.StatusCode), f"first assign failed: {answer}"
        )

    async def keep_flowing(self, traffic: Traffic, label: str) -> None:
        await keep_flowing_via(
            self._result, traffic, self.movers[self.owner].address, self.via[self.owner], label
        )

    async def inject(self, round_: int, clients: Sequence[_Client]) -> None:
        """This round's fault; ``clients`` are pointed at the new owner after a takeover."""
        fault = self._faults[round_ % len(self._faults)]
        self.done[fault] = self.done.get(fault, 0) + 1
        if fault == "lost-answers":
            for proxy in self._proxies:
                proxy.reset()
        else:
            victim, survivor = self.movers[self.owner], self.movers[1 - self.owner]
            if fault == "kill-9-owner":
                await victim.kill()
            elif fault == "kill-front":
                await self._kill_front(round_, victim)
            answer = await assign(survivor.address, self.channel)
            if isinstance(answer, grpc.StatusCode):
                self._result.problems.append(f"round {round_}: takeover: {answer.name}")
            self.owner = 1 - self.owner
            for client in clients:
                client.prefer(self.via[self.owner])
            if fault != "takeover":
                await victim.kill()  # the node of a killed front serves nobody: restart it
                await victim.start()
        self._result.faults += 1

    async def _kill_front(self, round_: int, victim: NodeProcess) -> None:
        """SIGKILL ``victim``'s front alone; its node must notice (it turns not ready)."""
        said = f"{FRONT_BINARY} exited on its own"
        before = victim.log_text().count(said)
        if not victim.kill_child(FRONT_BINARY):
            self._result.problems.append(f"round {round_}: node {victim.node_id} has no front")
            return
        noticed = await _logged(victim, said, before, timeout=10.0)
        self._result.expect(
            noticed, f"round {round_}: node {victim.node_id} did not notice its front died"
        )
