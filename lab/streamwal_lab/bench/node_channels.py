"""The node-channels suite: appenders spread over many channels of one node, against raw.

For each channel count N, ``max(min_appenders, N)`` appenders are spread round-robin
over N channels: on one side each appender has its own ``ProduceStream`` to a node in a
child process (:mod:`streamwal_lab.bench.node_process`, tracing on) that owns the N
channels; on the other each appends with ``send`` to one of N raw producers
(:mod:`streamwal_lab.bench.raw`) on one client in this process. The two run in turn,
``repeats`` times, interleaved; appends/s are the medians. The WAL's own side of the
same question is the ``channels`` suite (one process per point).

A third side, after the raw one in each repeat, is the ceiling: as many streams to a
gRPC echo server in another child (:mod:`streamwal_lab.bench.grpc_echo`), each
answer sent after the raw side's mean latency of that repeat (its appenders over its
appends/s), traced as the node is. That is a node whose channels cost no CPU, so
``ceiling/raw`` is the most the node can reach here against raw producers in a closed
loop of one append in flight per appender.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Unpack

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.node.client import AppendStream, NodeClient
from streamwal_lab.bench.channels_worker import bounded
from streamwal_lab.bench.grpc_echo import EchoServer
from streamwal_lab.bench.node import tracing_of
from streamwal_lab.bench.node_process import node_and_client
from streamwal_lab.bench.raw import raw_client, raw_producer
from streamwal_lab.bench.sides import (
    Append,
    Latest,
    Schedule,
    Timed,
    after,
    interleaved,
    spread,
)
from streamwal_lab.bench.stats import median_of, ratio
from streamwal_lab.bench.target import BenchTarget, Timing, new_run

__all__ = ["DEFAULT_NODE_CHANNELS", "run_node_channels_bench"]

DEFAULT_NODE_CHANNELS = (16, 256)


async def run_node_channels_bench(
    target: BenchTarget,
    *,
    channels: Sequence[int] = DEFAULT_NODE_CHANNELS,
    min_appenders: int = 32,
    payload_bytes: int = 128,
    **timing: Unpack[Timing],
) -> dict[str, Any]:
    """Every channel count; see the module docstring."""
    run = new_run()
    schedule = Schedule.of(timing)
    config = target.pulsar_config()
    raw = raw_client(target.pulsar_url)
    payload = b"c" * payload_bytes
    points: list[dict[str, Any]] = []
    try:
        async with (
            node_and_client(
                target, key_prefix=f"/bench-nch-{run}-node", log_name=f"node-channels-{run}.log"
            ) as (node, client),
            EchoServer(traced=True, otlp_endpoint=target.otlp_endpoint) as echo,
        ):
            for n in channels:
                point = await _point(
                    client, echo, raw, config, f"{run}-{n}", n, max(min_appenders, n),
                    payload, schedule,
                )  # fmt: skip
                points.append(point)
                target.progress(
                    f"node channels {n:>4}: node {point['node']['per_s']:>7.0f}/s "
                    f"raw {point['raw']['per_s']:>7.0f}/s ({point['node_vs_raw_ratio']}); "
                    f"ceiling {point['ceiling_vs_raw_ratio']}"
                )
    finally:
        await raw.close()
    return {
        **schedule.figures(),
        "payload_bytes": payload_bytes,
        "node": {"process": "child", "tracing": tracing_of(target), "exit_code": node.exit_code},
        "points": points,
    }


async def _point(
    client: NodeClient,
    echo: EchoServer,
    raw: Any,
    config: PulsarConfig,
    name: str,
    n: int,
    appenders: int,
    payload: bytes,
    schedule: Schedule,
) -> dict[str, Any]:
    names = [f"bench-nch-node-{name}-{i}" for i in range(n)]
    await bounded([lambda c=c: client.assign(c) for c in names])  # type: ignore[misc]
    streams: list[AppendStream] = [client.open_stream(names[i % n]) for i in range(appenders)]
    echoes = [echo.open_stream(delayed=True) for _ in range(appenders)]
    producers = await bounded(
        [
            lambda i=i: raw_producer(raw, config.topic(f"bench-nch-raw-{name}-{i}"), config)  # type: ignore[misc]
            for i in range(n)
        ]
    )
    try:
        node_appends: list[Append] = [s.append for s in streams]
        raw_appends: list[Append] = [producers[i % n].send for i in range(appenders)]
        ceiling_appends: list[Append] = [e.append for e in echoes]
        raw_side = Latest(spread(raw_appends, payload))
        sides: dict[str, Timed] = {
            "node": spread(node_appends, payload),
            "raw": raw_side,
            # after the raw side of each repeat: its mean latency
            "ceiling": after(echo, raw_side, appenders, spread(ceiling_appends, payload)),
        }
        runs = await interleaved(sides, schedule)
    finally:
        await asyncio.gather(*(s.close() for s in streams), *(e.close() for e in echoes))
        await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)
        await bounded([lambda c=c: client.remove(c) for c in names])  # type: ignore[misc]
    node_f, raw_f, ceiling_f = (median_of(runs[side]) for side in ("node", "raw", "ceiling"))
    return {
        "channels": n,
        "appenders": appenders,
        "node": node_f,
        "raw": raw_f,
        "ceiling": ceiling_f,
        "node_vs_raw_ratio": ratio(node_f["per_s"], raw_f["per_s"]),
        "ceiling_vs_raw_ratio": ratio(ceiling_f["per_s"], raw_f["per_s"]),
        "p999_ratio": ratio(node_f["p999_ms"], raw_f["p999_ms"]),
        "runs": runs,
    }
