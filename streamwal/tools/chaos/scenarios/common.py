"""Helpers the scenarios share: starting node groups, assigning, timing, the TSO leader."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import etcd3
import grpc

from streamwal.errors import DecodeError
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.tools.chaos.env import ChaosEnv, node_settings
from streamwal.tools.chaos.nodes import NodeProcess
from streamwal.tools.chaos.result import ScenarioResult
from streamwal.tools.chaos.traffic import Traffic
from streamwal.tso.store import LeaderRecord

__all__ = [
    "assign",
    "channel_per_node",
    "keep_flowing",
    "leader_address",
    "move",
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
    remote = {"mode": "remote", "remote_addresses": [oracle.address], "batch_size": batch_size}
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
    async with grpc.aio.insecure_channel(
        address, options=[("grpc.use_local_subchannel_pool", 1)]
    ) as channel:
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
