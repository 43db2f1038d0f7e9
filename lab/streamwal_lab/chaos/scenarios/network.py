"""Network faults between nodes and the broker, and between a node and etcd.

Every connection of the nodes to the broker and of node 1 (which runs the oracle) to
etcd goes through a :class:`~streamwal_lab.faultproxy.FaultProxy`. (A standalone broker tells
clients to reach the topic through the service URL they looked it up with, so the
proxy in front of the service URL carries all the traffic, not only the lookups: the
blackhole round checks that no append completes while that proxy answers nothing.)
Rounds cycle through latency, connection resets, refused connections and blackholes
(timeouts) on the broker links, and latency, resets and a blackhole longer than the
TSO lease on the etcd link. After each fault, appends must resume on both channels;
a channel whose owner dropped it meanwhile is assigned again, as a coordinator would.
"""

from __future__ import annotations

import asyncio

import grpc

from streamwal_lab.chaos.env import ChaosEnv, node_settings
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import assign, keep_all_flowing
from streamwal_lab.chaos.traffic import Traffic
from streamwal_lab.faultproxy import FaultProxy

__all__ = ["FAULTS", "run"]

FAULTS = (
    "broker-blackhole",
    "broker-latency",
    "broker-reset",
    "broker-refuse",
    "etcd-latency",
    "etcd-reset",
    "etcd-blackhole",
)


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("network-faults")
    broker_port = int(env.pulsar_url.rsplit(":", 1)[1])
    etcd_port = int(env.etcd_endpoint.rsplit(":", 1)[1])
    async with (
        FaultProxy(broker_port) as to_broker_1,
        FaultProxy(broker_port) as to_broker_2,
        FaultProxy(etcd_port) as to_etcd,
    ):
        prefix = "/" + env.name("net")
        one = env.node(
            1,
            node_settings(
                f"pulsar://{to_broker_1.url_host}",
                to_etcd.url_host,
                {"mode": "in-process", "key_prefix": prefix, "batch_size": 50},
                pulsar={"admin_url": env.broker_admin_url},
            ),
        )
        await one.start()
        two = env.node(
            2,
            node_settings(
                f"pulsar://{to_broker_2.url_host}",
                env.etcd_endpoint,
                {
                    "mode": "remote",
                    "remote_addresses": [one.address],
                    "batch_size": 50,
                    "key_prefix": prefix,  # the channels' terms, beside the oracle's
                },
                pulsar={"admin_url": env.broker_admin_url},
            ),
        )
        await two.start()
        nodes = [one, two]
        traffic: list[Traffic] = []
        for node in nodes:
            channel = env.name(f"net-{node.node_id}")
            answer = await assign(node.address, channel)
            result.expect(not isinstance(answer, grpc.StatusCode), f"assign {channel}: {answer}")
            t = env.traffic(channel, [n.address for n in nodes], workers=2, call_timeout=8.0)
            t.prefer(node.address)
            await t.start()
            traffic.append(t)
        home = {t.channel: node.address for t, node in zip(traffic, nodes, strict=True)}
        counts: dict[str, int] = {}
        for round_ in range(rounds):
            kind = FAULTS[round_ % len(FAULTS)]
            await keep_all_flowing(result, traffic, home, f"round {round_}, before {kind}")
            proxy = env.rng.choice([to_broker_1, to_broker_2])
            if kind == "broker-blackhole":
                proxy = to_broker_1  # node 1's channel is the one checked below
            await _inject(kind, proxy, to_etcd, env, result, traffic[0])
            counts[kind] = counts.get(kind, 0) + 1
            result.faults += 1
            await keep_all_flowing(result, traffic, home, f"round {round_}, after {kind}", 30)
            result.rounds += 1
        await env.check(result, traffic)
        result.figures["faults by kind"] = counts
        result.figures.setdefault("channels assigned again", 0)
        result.figures["proxy connections (broker 1, broker 2, etcd)"] = [
            to_broker_1.connections,
            to_broker_2.connections,
            to_etcd.connections,
        ]
    return result


async def _inject(
    kind: str,
    broker: FaultProxy,
    etcd: FaultProxy,
    env: ChaosEnv,
    result: ScenarioResult,
    checked: Traffic,
) -> None:
    rng = env.rng
    if kind == "broker-latency":
        await _for(broker, "pass", rng.uniform(0.05, 0.2), 2.0)
    elif kind == "broker-reset":
        broker.reset()
    elif kind == "broker-refuse":
        await _for(broker, "refuse", 0.0, 2.0)
    elif kind == "broker-blackhole":
        broker.set_mode("blackhole")
        await asyncio.sleep(1.0)  # answers already on their way may still arrive
        before = len(checked.acks)
        await asyncio.sleep(2.0)
        during = len(checked.acks) - before
        broker.set_mode("pass")
        result.figures.setdefault("acks through a blackholed broker link", []).append(during)
        result.expect(during == 0, f"{during} appends completed while the broker link was cut")
    elif kind == "etcd-latency":
        await _for(etcd, "pass", rng.uniform(0.1, 0.3), 2.0)
    elif kind == "etcd-reset":
        etcd.reset()
    elif kind == "etcd-blackhole":
        await _for(etcd, "blackhole", 0.0, 4.5)  # longer than the 3 s TSO lease
    else:
        raise ValueError(kind)


async def _for(proxy: FaultProxy, mode: str, latency: float, seconds: float) -> None:
    proxy.set_mode(mode, latency)  # type: ignore[arg-type]
    await asyncio.sleep(seconds)
    proxy.set_mode("pass", 0.0)
