"""Helpers the scenarios share: starting node groups, assigning, timing, the TSO leader."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import etcd3
import grpc

from node.chaos.env import ChaosEnv, node_settings
from node.chaos.nodes import NodeProcess
from node.proto import streaming_pb2 as pb
from node.proto import streaming_pb2_grpc as pb_grpc
from tso.store import LeaderRecord
from wal.errors import DecodeError

__all__ = [
    "assign",
    "leader_address",
    "start_all",
    "tso_group",
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
) -> list[NodeProcess]:
    """Node 1 runs the oracle in-process; nodes 2..count take timestamps from it.

    ``batch_size``: timestamps an allocator fetches at once (small: a TSO outage
    stops appends sooner).
    """
    pulsar = pulsar_url or env.pulsar_url
    etcd = etcd_endpoint or env.etcd_endpoint
    key_prefix = prefix or "/" + env.name("tso")
    tso = {"mode": "in-process", "key_prefix": key_prefix, "batch_size": batch_size}
    oracle = env.node(1, node_settings(pulsar, etcd, tso))
    await oracle.start()
    remote = {"mode": "remote", "remote_addresses": [oracle.address], "batch_size": batch_size}
    others = [env.node(i, node_settings(pulsar, etcd, remote)) for i in range(2, count + 1)]
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
