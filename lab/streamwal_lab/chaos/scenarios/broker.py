"""Broker restarts during appends and during a channel's first time tick.

A private broker (the shared one is never stopped) serves two node processes, each
owning a channel under load, and one node running in this process, whose spans are
captured. Each round stops the broker, asks the in-process node to open a new channel
while the broker is down, starts the broker again, and expects: the open succeeds
after several attempts, and its trace holds one span per attempt, the failed ones in
error and the last one not; appends on the loaded channels resume.
"""

from __future__ import annotations

import asyncio

import grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from streamwal.node.config import load_config
from streamwal.server.runtime import Node
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import (
    assign,
    channel_per_node,
    keep_all_flowing,
    tso_group,
)
from streamwal_lab.chaos.spans import SpanCapture, capture_spans

__all__ = ["run"]


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("broker-restart")
    with capture_spans() as spans:
        await _rounds(env, rounds, result, spans)
    return result


async def _rounds(env: ChaosEnv, rounds: int, result: ScenarioResult, spans: SpanCapture) -> None:
    pulsar = await env.private_pulsar()
    nodes = await tso_group(env, 2, pulsar_url=pulsar.url)
    config = load_config(
        environ={
            "STREAMWAL_NODE__ID": "9",
            "STREAMWAL_NODE__LISTEN": "127.0.0.1:0",
            "STREAMWAL_NODE__METRICS_LISTEN": "",
            "STREAMWAL_PULSAR__SERVICE_URL": pulsar.url,
            "STREAMWAL_PULSAR__OPERATION_TIMEOUT_S": "2",
            "STREAMWAL_ETCD__ENDPOINTS": env.etcd_endpoint,
            "STREAMWAL_TSO__MODE": "remote",
            "STREAMWAL_TSO__REMOTE_ADDRESSES": nodes[0].address,
            # the oracle's prefix: the channels' terms live under it (and go with it)
            "STREAMWAL_TSO__KEY_PREFIX": nodes[0].config["tso"]["key_prefix"],
            "STREAMWAL_WAL__FIRST_TIME_TICK_BACKOFF__MAXIMUM": "0.5",
        }
    )
    home, traffic = await channel_per_node(env, result, nodes, "broker")
    async with Node(config) as local:
        for round_ in range(rounds):
            await keep_all_flowing(result, traffic, home, f"round {round_}, before")
            await asyncio.sleep(env.rng.uniform(0.2, 0.8))
            await pulsar.stop()
            result.faults += 1
            channel = env.name(f"broker-open-{round_}")
            opening = asyncio.create_task(assign(local.address, channel, timeout=180))
            await asyncio.sleep(env.rng.uniform(1.0, 3.0))
            await pulsar.start()
            answer = await opening
            if isinstance(answer, grpc.StatusCode):
                result.problems.append(f"round {round_}: open during the outage: {answer.name}")
            else:
                _check_trace(result, round_, spans.spans_of(answer.trace_id), answer.attempts)
                t = env.traffic(channel, [local.address], workers=1)
                home[channel] = local.address
                await t.start()
                traffic.append(t)
            await keep_all_flowing(result, traffic, home, f"round {round_}, after", 60)
            result.rounds += 1
        await env.check(result, traffic, pulsar_url=pulsar.url)


def _check_trace(
    result: ScenarioResult, round_: int, spans: list[ReadableSpan], attempts: int
) -> None:
    result.figures.setdefault("open attempts", []).append(attempts)
    result.expect(attempts >= 2, f"round {round_}: the open took {attempts} attempt(s)")
    opens = [s for s in spans if s.name == "wal.open"]
    tries = sorted(
        (s for s in spans if s.name == "wal.first_time_tick.attempt"),
        key=lambda s: int((s.attributes or {}).get("wal.attempt", 0)),  # type: ignore[arg-type]
    )
    result.expect(len(opens) == 1, f"round {round_}: {len(opens)} wal.open spans in the trace")
    result.expect(
        len(tries) == attempts,
        f"round {round_}: {len(tries)} attempt spans for {attempts} attempts",
    )
    failed = [s for s in tries if s.status.status_code is StatusCode.ERROR]
    result.expect(
        len(failed) == attempts - 1 and bool(tries) and tries[-1] not in failed,
        f"round {round_}: {len(failed)} of {len(tries)} attempt spans failed",
    )
