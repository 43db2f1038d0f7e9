"""The node suite: appends and reads through the node's gRPC service, against the WAL itself.

One node runs in a child process (:mod:`streamwal_lab.bench.node_process`: the client and the
node must not share a CPU's worth of event loop) and this process drives it through
:class:`~streamwal.node.client.NodeClient`, the client the tests and the demo use. For each
(payload size, concurrency) cell, on fresh channels, three sides run in turn,
``repeats`` times, interleaved (WAL, unary, stream, WAL...) so drift on a noisy machine
hits all three; the figures are the medians:

- ``wal``: the WAL library appending directly, in this process (the append suite's WAL);
- ``unary``: ``Produce`` calls, one per append;
- ``stream``: one ``ProduceStream`` call per caller, kept open; each caller has one
  append in flight on its own stream, like the other two sides, so latencies compare.

``unary/WAL`` and ``stream/WAL`` are what the gRPC layer costs: serialisation, the
loopback socket, the servicer, and the node's telemetry (on, as a deployed node's is).
Two more sides, interleaved with those, measure the floor of that cost: ``echo_unary``
and ``echo_stream`` drive a gRPC echo server in another child process
(:mod:`streamwal_lab.bench.grpc_echo`) with the same requests, callers and calls in
flight, and nothing behind them. ``echo_*/WAL`` is the most a node on grpc.aio could
reach on this machine; ``unary/echo_unary`` and ``stream/echo_stream`` how much of it
the node reaches. Two more, ``ceiling_unary`` and ``ceiling_stream``, call another
such server, answering after a wait of the WAL's mean latency in the repeat (the WAL side's
callers over its appends/s: a closed loop's mean), traced as the node is (its server
interceptor, exporting where the node exports, and NodeClient's client interceptors):
a node whose WAL cost no CPU at all. Each caller has one append in flight, so no node
on grpc.aio, traced, can beat their closed loop here; ``ceiling_*/WAL`` is the most a
latency-bound target can reach on this machine.

The node's WAL runs in another process than its callers while the direct WAL shares
this one with its callers: on a machine with spare cores that favours the node, so a
ratio near 1 at high concurrency is no proof that gRPC is free.

``consume``: ``messages`` inserts are read back from the start of a channel through
``Consume``, and the same from a directly opened WAL, messages/s (time ticks included,
as both deliver them), medians of ``consume_repeats``.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence
from typing import Any, Protocol, Unpack

from streamwal.adaptors.pulsar import PulsarOpener
from streamwal.node.client import NodeClient, policy
from streamwal.tso import InProcessTSO
from streamwal.wal.backend import DeliveryPolicy
from streamwal.wal.initializing import open_wal
from streamwal_lab.bench.append import appending
from streamwal_lab.bench.grpc_echo import EchoServer
from streamwal_lab.bench.node_process import node_and_client
from streamwal_lab.bench.scan import fill_wal, timed_scan
from streamwal_lab.bench.sides import (
    Latest,
    Schedule,
    Timed,
    after,
    interleaved,
    side_medians,
    wal_appender,
)
from streamwal_lab.bench.stats import ratio, ratios
from streamwal_lab.bench.target import BenchTarget, Timing, new_run

__all__ = ["DEFAULT_NODE_CONCURRENCY", "DEFAULT_NODE_PAYLOADS", "run_node_bench", "tracing_of"]

DEFAULT_NODE_PAYLOADS = (128,)
DEFAULT_NODE_CONCURRENCY = (1, 32)
SIDES = ("wal", "unary", "stream", "echo_unary", "echo_stream", "ceiling_unary", "ceiling_stream")

#: the figures of each gRPC side taken over the WAL's
_RATIOS = ("per_s", "p50_ms", "p99_ms")
_FILL_CALLERS = 8
_FILL_BATCH = 500
_READ_TIMEOUT_S = 300.0


class _Stream(Protocol):
    async def append(self, payload: bytes, /) -> object: ...

    async def close(self) -> None: ...


class _StreamPool:
    """One open stream per caller: an append takes a stream no other caller is using.

    ``timed_appends`` runs ``concurrency`` callers over one append function; with as
    many streams as callers a free one is always there, so every stream carries one
    append at a time.
    """

    def __init__(self, streams: Sequence[_Stream]) -> None:
        self._free = list(streams)
        self._all = list(streams)

    async def append(self, data: bytes) -> object:
        stream = self._free.pop()
        try:
            return await stream.append(data)
        finally:
            self._free.append(stream)

    async def close(self) -> None:
        await asyncio.gather(*(s.close() for s in self._all))


async def run_node_bench(
    target: BenchTarget,
    *,
    payloads: Sequence[int] = DEFAULT_NODE_PAYLOADS,
    concurrency: Sequence[int] = DEFAULT_NODE_CONCURRENCY,
    consume_messages: int = 10_000,
    consume_repeats: int = 3,
    **timing: Unpack[Timing],
) -> dict[str, Any]:
    """Every cell of ``payloads`` x ``concurrency``, then the read-back; see the module."""
    run = new_run()
    schedule = Schedule.of(timing, repeats=5)
    config = target.pulsar_config()
    cells: list[dict[str, Any]] = []
    async with (
        node_and_client(
            target, key_prefix=f"/bench-node-{run}-node", log_name=f"node-{run}.log"
        ) as (node, client),
        EchoServer() as echo,
        EchoServer(traced=True, otlp_endpoint=target.otlp_endpoint) as ceiling,
        target.wal_services(f"/bench-node-{run}-wal", config) as (tso, opener),
    ):
        target.progress(f"node: serving on {node.address} (log {node.log_path})")
        for size in payloads:
            for conc in concurrency:
                name = f"{run}-{size}-{conc}"
                cell = await _cell(client, (echo, ceiling), opener, tso, name, size, conc, schedule)
                cells.append(cell)
                target.progress(
                    f"node {size:>6} B x{conc:<3}: wal {cell['wal']['per_s']:>7.0f}/s "
                    f"unary {cell['unary']['per_s']:>7.0f}/s ({cell['unary_throughput_ratio']}) "
                    f"stream {cell['stream']['per_s']:>7.0f}/s "
                    f"({cell['stream_throughput_ratio']}); p99 wal {cell['wal']['p99_ms']} "
                    f"unary {cell['unary']['p99_ms']} stream {cell['stream']['p99_ms']} ms; "
                    f"gRPC echo unary {cell['echo_unary']['per_s']:.0f}/s "
                    f"stream {cell['echo_stream']['per_s']:.0f}/s; ceiling unary "
                    f"{cell['ceiling_unary_throughput_ratio']} "
                    f"stream {cell['ceiling_stream_throughput_ratio']}"
                )
        consume = await _consume(
            client, opener, tso, run, consume_messages, min(payloads), consume_repeats
        )
        target.progress(
            f"node consume: grpc {consume['node_per_s']:.0f}/s, wal {consume['wal_per_s']:.0f}/s "
            f"({consume['node_vs_wal_ratio']}), batches {consume['node_batch_per_s']:.0f}/s "
            f"({consume['node_batch_vs_wal_ratio']})"
        )
    if node.exit_code not in (0, None):
        target.progress(f"node: exited with {node.exit_code}, see {node.log_path}")
    return {
        **schedule.figures(),
        "node": {"process": "child", "tracing": tracing_of(target), "exit_code": node.exit_code},
        "cells": cells,
        "consume": consume,
    }


def tracing_of(target: BenchTarget) -> str:
    """How the bench's node traces (as the ceiling's echo server does)."""
    if target.otlp_endpoint:
        return f"on, exported to {target.otlp_endpoint}"
    return "on, not exported"


async def _cell(
    client: NodeClient,
    echoes: tuple[EchoServer, EchoServer],
    opener: PulsarOpener,
    tso: InProcessTSO,
    name: str,
    size: int,
    conc: int,
    schedule: Schedule,
) -> dict[str, Any]:
    payload = b"n" * size
    echo, ceiling = echoes  # the floor (untraced), the ceiling (traced, delayed)
    node_channel = f"bench-node-grpc-{name}"
    # each acquisition is released on the way out, whichever later one failed
    async with contextlib.AsyncExitStack() as held:
        wal = await open_wal(opener, f"bench-node-wal-{name}", tso.allocator(), node_id=1)
        held.push_async_callback(wal.close)
        await client.assign(node_channel)
        held.push_async_callback(client.remove, node_channel)
        pool = _StreamPool([client.open_stream(node_channel) for _ in range(conc)])
        held.push_async_callback(pool.close)
        echo_pool = _StreamPool([echo.open_stream() for _ in range(conc)])
        held.push_async_callback(echo_pool.close)
        delayed_pool = _StreamPool([ceiling.open_stream(delayed=True) for _ in range(conc)])
        held.push_async_callback(delayed_pool.close)

        async def unary_append(data: bytes) -> object:
            return await client.produce(node_channel, data)

        wal_side = Latest(appending(wal_appender(wal), payload, conc))
        sides: dict[str, Timed] = {
            "wal": wal_side,
            "unary": appending(unary_append, payload, conc),
            "stream": appending(pool.append, payload, conc),
            "echo_unary": appending(echo.unary, payload, conc),
            "echo_stream": appending(echo_pool.append, payload, conc),
            # answered after the WAL side of each repeat: its mean latency (see the module)
            "ceiling_unary": after(
                ceiling, wal_side, conc, appending(ceiling.unary_after, payload, conc)
            ),
            "ceiling_stream": after(
                ceiling, wal_side, conc, appending(delayed_pool.append, payload, conc)
            ),
        }
        runs = await interleaved(sides, schedule)
    medians = side_medians(runs)
    cell: dict[str, Any] = {"payload_bytes": size, "concurrency": conc, **medians}
    for side in ("unary", "stream"):
        cell.update(ratios(medians[side], medians["wal"], _RATIOS, prefix=f"{side}_"))
        floor = medians[f"echo_{side}"]["per_s"]
        cell[f"echo_{side}_throughput_ratio"] = ratio(floor, medians["wal"]["per_s"])
        cell[f"{side}_vs_echo_ratio"] = ratio(medians[side]["per_s"], floor)
        top = medians[f"ceiling_{side}"]["per_s"]
        cell[f"ceiling_{side}_throughput_ratio"] = ratio(top, medians["wal"]["per_s"])
        cell[f"{side}_vs_ceiling_ratio"] = ratio(medians[side]["per_s"], top)
    cell["runs"] = runs
    return cell


async def _fill_node(client: NodeClient, channel: str, messages: int, payload: bytes) -> None:
    batches = [
        [payload] * min(_FILL_BATCH, messages - start) for start in range(0, messages, _FILL_BATCH)
    ]
    pending = iter(batches)

    async def caller() -> None:
        for batch in pending:
            await client.produce_stream(channel, batch)

    await asyncio.gather(*(caller() for _ in range(_FILL_CALLERS)))


async def _read_node(client: NodeClient, channel: str, inserts: int) -> float:
    """Messages/s reading from the start until ``inserts`` data messages came."""
    started = time.perf_counter()
    seen = read = 0
    async for m in client.consume(channel, policy("all"), timeout=_READ_TIMEOUT_S):
        read += 1
        if m.type == "insert":
            seen += 1
            if seen == inserts:
                break
    return read / (time.perf_counter() - started)


async def _read_node_batches(client: NodeClient, channel: str, inserts: int) -> float:
    """:func:`_read_node` through ``ConsumeBatch`` (many messages per frame)."""
    started = time.perf_counter()
    seen = read = 0
    async for frame in client.consume_batches(channel, policy("all"), timeout=_READ_TIMEOUT_S):
        for m in frame:
            read += 1
            if m.type == "insert":
                seen += 1
                if seen == inserts:
                    return read / (time.perf_counter() - started)
    raise AssertionError("the ConsumeBatch stream ended")


async def _consume(
    client: NodeClient,
    opener: PulsarOpener,
    tso: InProcessTSO,
    run: str,
    messages: int,
    size: int,
    repeats: int,
) -> dict[str, Any]:
    payload = b"c" * size
    node_channel = f"bench-node-consume-{run}"
    async with contextlib.AsyncExitStack() as held:
        await client.assign(node_channel)
        held.push_async_callback(client.remove, node_channel)
        wal = await open_wal(opener, f"bench-node-wal-consume-{run}", tso.allocator(), node_id=1)
        held.push_async_callback(wal.close)
        await _fill_node(client, node_channel, messages, payload)
        await fill_wal(wal, messages, payload)
        node_rates, batch_rates, wal_rates = [], [], []
        for _ in range(repeats):
            seconds, read, _ = await timed_scan(wal, DeliveryPolicy.all(), messages)
            wal_rates.append(read / seconds)
            node_rates.append(await _read_node(client, node_channel, messages))
            batch_rates.append(await _read_node_batches(client, node_channel, messages))
    node_per_s = round(statistics.median(node_rates), 1)
    batch_per_s = round(statistics.median(batch_rates), 1)
    wal_per_s = round(statistics.median(wal_rates), 1)
    return {
        "messages": messages,
        "payload_bytes": size,
        "repeats": repeats,
        "node_per_s": node_per_s,
        "wal_per_s": wal_per_s,
        "node_vs_wal_ratio": ratio(node_per_s, wal_per_s),
        "node_batch_per_s": batch_per_s,
        "node_batch_vs_wal_ratio": ratio(batch_per_s, wal_per_s),
    }
