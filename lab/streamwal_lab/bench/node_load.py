"""The node-load suite: what one node adds over its WAL, and what it carries, at load.

One suite, one module past 500 lines: its cells share one environment (the two node
processes, the echo server, the WAL in process) and their figures are ratios between
sides of the same run, so they are read together.

The node suite answers one question per caller with one append in flight; this one
asks what a deployed node is judged by: the latency it adds, the load it carries with
many appends in flight, large messages, many channels pipelined, and the CPU each
append costs it. Every cell runs its sides in turn, ``repeats`` times, interleaved, so
a burst from another process hits every side; its figures are the medians and its
ratios are taken between sides of the same run.

Two nodes run as child processes (:mod:`streamwal_lab.bench.node_process`), alike but
for tracing: ``node`` samples as a deployed node does by default (a share of new root
traces), ``node_full`` traces every call (``OTEL_TRACES_SAMPLER=always_on``). Both
export where the target's collector is. Each cell runs the two as sides of their own,
interleaved with the others, so the cost of tracing everything is measured beside the
default's in the same run rather than in another run on a differently loaded machine.
Targets are judged on the default; the full-sampling figure is reported beside.

The cells:

- ``latency``: ``callers`` (32) callers, one append in flight each, 128 B: the WAL
  appending directly in this process, ``Produce`` and ``ProduceStream`` (a stream per
  caller) on each node, and the gRPC echo server (:mod:`streamwal_lab.bench.grpc_echo`,
  untraced, nothing behind it) called the same two ways: its round trip is the floor of
  what any grpc.aio servicer costs here. The same server's unary calls answered after
  the WAL's mean latency of the round are the unary ceiling (``ceiling_unary``): a
  node whose WAL cost no CPU should not beat their rate. The node's added latency is
  its p50 (p99) minus the WAL's; the p50 is judged against the echo's round trip, the
  p99 against the WAL's own p99. The node's and the echo server's CPU per call come
  from the same runs (:mod:`streamwal_lab.bench.cpu`): the echo server's is what gRPC itself costs a
  process per call, so the node's over it is what the servicer, the WAL and telemetry
  cost. ``Produce`` is called the way an application calls it, through a
  ``NodeClient`` as made by default: the appends that meet on a channel share calls
  (:mod:`streamwal.node.client.coalescer`). The same calls through a client that makes
  one ``Produce`` call per append (``coalesce=False``) are the ``node_calls`` side, on
  the default node: what the echo's figures and the ceiling compare with.
- ``carried``: ``streams`` (32) ``ProduceStream`` calls with ``depth`` (16) appends in
  flight on each, against the WAL with as many appends in flight: throughput once
  latency no longer bounds it, at each payload size.
- ``large``: ``Produce`` of 64 KiB and 1 MiB messages from ``large_callers`` callers,
  against the raw producer (:mod:`streamwal_lab.bench.raw`) sending the same messages,
  MB/s. Several callers: with one, the ratio is a round trip's (the latency cell's
  question); the sizes stay within the broker's 5 MiB, so the node does not chunk (the
  large-messages suite measures chunking); the raw side sends a message above 1 MiB as
  1 MiB pieces at once, as that suite does. The echo server takes the same bytes
  twice more: answering at once (``echo``: what receiving them costs a process, per
  call) and after the raw side's mean latency of the round (``ceiling``: gRPC's hop
  with these bytes on top of the raw producer's time, which a node should not beat).
  Both ceilings are untraced: the targets are judged on the node sampling as deployed.
- ``channels``: ``max(min_appenders, N)`` streams spread round-robin over N channels
  of each node, ``depth`` appends in flight on each, against N raw producers with the
  same appends in flight: many channels with nobody waiting for one append at a time.
- ``batches``: ``batch_callers`` callers sending ``ProduceBatch`` calls of ``batch``
  128 B messages, against ``WAL.append_many`` alike (:mod:`streamwal_lab.bench.pipelined`
  compares both with a raw ``send_async`` loop): the messages/s one node carries, the
  figure its mark of 40,000/s on two cores is about, with its CPU per message.

The suite deletes the topics and etcd keys it created.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Unpack

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.node.client import AppendStream, NodeClient
from streamwal.tso import InProcessTSO
from streamwal.wal.initializing import open_wal
from streamwal.wal.message import MessageType, MutableMessage
from streamwal_lab.bench.channels_worker import bounded
from streamwal_lab.bench.cpu import CPU_KEY, metered
from streamwal_lab.bench.grpc_echo import EchoServer
from streamwal_lab.bench.large import DEFAULT_RAW_MESSAGE_BYTES, in_mb, large_message, raw_pieces
from streamwal_lab.bench.node import tracing_of
from streamwal_lab.bench.node_process import node_and_client
from streamwal_lab.bench.pipelined import timed_batches
from streamwal_lab.bench.raw import raw_client, raw_producer
from streamwal_lab.bench.sides import (
    Append,
    Latest,
    Runs,
    Schedule,
    Timed,
    after,
    interleaved,
    side_medians,
    spread,
    wal_appender,
)
from streamwal_lab.bench.stats import ratio
from streamwal_lab.bench.target import BenchTarget, Timing, new_run
from streamwal_lab.stack.topics import delete_created, list_topics

__all__ = [
    "CALLS_SIDE",
    "CELLS",
    "DEFAULT_LOAD_CHANNELS",
    "DEFAULT_LOAD_LARGE_SIZES",
    "DEFAULT_LOAD_PAYLOADS",
    "FULL_SAMPLING",
    "NODES",
    "carried_figures",
    "latency_figures",
    "run_node_load_bench",
    "versus",
]

KiB = 1024
MiB = 1024 * KiB
CELLS = ("latency", "carried", "large", "channels", "batches")
DEFAULT_LOAD_PAYLOADS = (128, 4 * KiB)
DEFAULT_LOAD_LARGE_SIZES = (64 * KiB, MiB)
DEFAULT_LOAD_CHANNELS = (16, 256)
#: the node sides: default sampling, every call traced
NODES = ("node", "node_full")
#: the side of the pipelined cells whose streams send a frame per append
FRAME_PER_APPEND = "node_frames"
#: the latency cell's unary side through a client making a call per append
CALLS_SIDE = "node_calls_unary"
#: what makes the second node trace every call (the standard variable wins over its config)
FULL_SAMPLING = {"OTEL_TRACES_SAMPLER": "always_on"}
#: what sets the nodes' ``node.front``
FRONT_VARIABLE = "STREAMWAL_NODE__FRONT"
_LATENCY_PAYLOAD = 128
_KINDS = ("unary", "stream")
_SUFFIX = {"node": "d", "node_full": "f"}


def versus(medians: Mapping[str, Mapping[str, float]], base: str, key: str) -> dict[str, float]:
    """Each node side's ``key`` over the ``base`` side's: ``<side>_vs_<base>_ratio``."""
    return {
        f"{side}_vs_{base}_ratio": ratio(medians[side][key], medians[base][key])
        for side in (*NODES, FRAME_PER_APPEND)
        if side in medians
    }


def latency_figures(medians: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The latency cell's derived figures, for each of ``unary``/``stream`` on each node
    (``<node>_<kind>``): added p50/p99 (ms, node minus WAL), the added p50 over the echo
    server's p50 of the same kind, the added p99 over the WAL's p99, appends/s over the
    WAL's, and CPU per append over the echo server's CPU per call of the same kind (the
    same for :data:`CALLS_SIDE`, a unary side); and the unary ceiling's appends/s over
    the WAL's, where it was measured."""
    wal = medians["wal"]
    out: dict[str, float] = {}
    sides = [(f"{node}_{kind}", kind) for node in NODES for kind in _KINDS]
    for side, kind in [*sides, (CALLS_SIDE, "unary")]:
        if side not in medians:
            continue
        f, echo = medians[side], medians[f"echo_{kind}"]
        added_p50 = round(f["p50_ms"] - wal["p50_ms"], 3)
        added_p99 = round(f["p99_ms"] - wal["p99_ms"], 3)
        out[f"{side}_added_p50_ms"] = added_p50
        out[f"{side}_added_p99_ms"] = added_p99
        out[f"{side}_added_p50_vs_echo_ratio"] = ratio(added_p50, echo["p50_ms"])
        out[f"{side}_added_p99_vs_wal_ratio"] = ratio(added_p99, wal["p99_ms"])
        out[f"{side}_vs_wal_ratio"] = ratio(f["per_s"], wal["per_s"])
        out[f"{side}_cpu_vs_echo_ratio"] = ratio(f[CPU_KEY], echo[CPU_KEY])
    if "ceiling_unary" in medians:  # reports made before the ceiling lack it
        out["ceiling_unary_vs_wal_ratio"] = ratio(medians["ceiling_unary"]["per_s"], wal["per_s"])
    return out


def carried_figures(medians: Mapping[str, Mapping[str, float]], base: str) -> dict[str, float]:
    """Appends/s (or MB/s, where measured) of each node side over ``base``'s."""
    key = "mb_per_s" if "mb_per_s" in medians[base] else "per_s"
    return versus(medians, base, key)


async def run_node_load_bench(
    target: BenchTarget,
    *,
    cells: Sequence[str] = CELLS,
    callers: int = 32,
    payloads: Sequence[int] = DEFAULT_LOAD_PAYLOADS,
    streams: int = 32,
    depth: int = 16,
    large_sizes: Sequence[int] = DEFAULT_LOAD_LARGE_SIZES,
    large_callers: int = 4,
    channels: Sequence[int] = DEFAULT_LOAD_CHANNELS,
    min_appenders: int = 32,
    batch: int = 256,
    batch_callers: int = 4,
    front: str = "python",
    **timing: Unpack[Timing],
) -> dict[str, Any]:
    """The chosen ``cells`` (see the module) on one set of processes; ``front``: the
    nodes' ``node.front``."""
    unknown = set(cells) - set(CELLS)
    if unknown:
        raise ValueError(f"unknown cells {sorted(unknown)}; known: {', '.join(CELLS)}")
    run = new_run()
    schedule = Schedule.of(timing)
    admin = target.pulsar_admin_url
    before = await list_topics(admin) if admin is not None else None
    config = target.pulsar_config()
    raw = raw_client(target.pulsar_url)
    result: dict[str, Any] = {}
    try:
        async with (
            node_and_client(
                target,
                key_prefix=f"/bench-nl-{run}-node",
                log_name=f"node-load-{run}.log",
                extra_env={FRONT_VARIABLE: front},
            ) as (default_node, default_client),
            node_and_client(
                target,
                key_prefix=f"/bench-nl-{run}-node_full",
                log_name=f"node-load-full-{run}.log",
                node_id=2,
                extra_env={**FULL_SAMPLING, FRONT_VARIABLE: front},
            ) as (full_node, full_client),
            EchoServer() as echo,
            target.wal_services(f"/bench-nl-{run}-wal", config) as (tso, opener),
        ):
            env = _Env(
                target, run, config, opener, tso, raw, echo,
                {"node": default_client, "node_full": full_client},
                {"node": default_node.pid, "node_full": full_node.pid},
                schedule,
            )  # fmt: skip
            if "latency" in cells:
                result["latency"] = await _latency(env, callers)
            if "carried" in cells:
                result["carried"] = [await _carried(env, p, streams, depth) for p in payloads]
            if "large" in cells:
                result["large"] = [await _large(env, s, large_callers) for s in large_sizes]
            if "channels" in cells:
                result["channels"] = [
                    await _channels(env, n, max(min_appenders, n), depth) for n in channels
                ]
            if "batches" in cells:
                result["batches"] = await _batches(env, batch, batch_callers)
    finally:
        await raw.close()
        if admin is not None and before is not None:
            await delete_created(admin, before, lambda t: run in t)
    return {
        **schedule.figures(),
        "callers": callers,
        "streams": streams,
        "depth": depth,
        "large_callers": large_callers,
        "batch": batch,
        "batch_callers": batch_callers,
        "nodes": {
            "node": {"sampling": "default", "exit_code": default_node.exit_code},
            "node_full": {"sampling": "always_on", "exit_code": full_node.exit_code},
            "tracing": tracing_of(target),
            "front": front,
        },
        **result,
    }


class _Env:
    """What every cell runs against: the processes, clients and settings of the run."""

    def __init__(
        self,
        target: BenchTarget,
        run: str,
        config: PulsarConfig,
        opener: PulsarOpener,
        tso: InProcessTSO,
        raw: Any,
        echo: EchoServer,
        clients: dict[str, NodeClient],
        pids: dict[str, int],
        schedule: Schedule,
    ) -> None:
        self.target, self.run, self.config, self.opener, self.tso = target, run, config, opener, tso
        self.raw, self.echo, self.clients, self.pids = raw, echo, clients, pids
        self.schedule = schedule

    async def runs(self, sides: Mapping[str, Timed]) -> Runs:
        return await interleaved(sides, self.schedule)

    async def wal(self, held: contextlib.AsyncExitStack, name: str) -> Append:
        wal = await open_wal(self.opener, f"bench-nl-wal-{name}", self.tso.allocator(), node_id=1)
        held.push_async_callback(wal.close)
        return wal_appender(wal)

    async def assigned(
        self, held: contextlib.AsyncExitStack, names: Sequence[str]
    ) -> dict[str, list[str]]:
        """``names`` assigned on each node under a name of its own (node -> its names),
        removed on the way out: a channel is a topic, and two nodes writing one would
        fence each other."""
        assigned: dict[str, list[str]] = {}
        for node, client in self.clients.items():
            own = assigned[node] = [f"{name}-{_SUFFIX[node]}" for name in names]
            await bounded([lambda c=c, client=client: client.assign(c) for c in own])  # type: ignore[misc]
            held.push_async_callback(
                bounded,
                [lambda c=c, client=client: client.remove(c) for c in own],  # type: ignore[misc]
            )
        return assigned

    def streams(
        self,
        held: contextlib.AsyncExitStack,
        node: str,
        names: Sequence[str],
        count: int,
        *,
        coalesce: bool = True,
    ) -> list[AppendStream]:
        """``count`` streams to ``node``, round-robin over ``names``, closed on the way out."""
        client = self.clients[node]
        opened = [
            client.open_stream(names[i % len(names)], coalesce=coalesce) for i in range(count)
        ]

        async def close() -> None:
            await asyncio.gather(*(s.close() for s in opened), return_exceptions=True)

        held.push_async_callback(close)
        return opened

    def node_sides(
        self,
        held: contextlib.AsyncExitStack,
        own: Mapping[str, Sequence[str]],
        count: int,
        depth: int,
        payload: bytes,
    ) -> dict[str, Timed]:
        """Each node's side: ``count`` streams over its own channels, ``depth`` appends
        in flight on each, metered by the node's CPU; and ``node_frames``, the default
        node's streams sending a frame per append (``coalesce=False``), which shows what
        the client's coalescing is worth in the same run."""

        def side(node: str, coalesce: bool = True) -> Timed:
            opened = self.streams(held, node, own[node], count, coalesce=coalesce)
            appends = [s.append for s in opened for _ in range(depth)]
            return metered(self.pids[node], spread(appends, payload))

        sides = {node: side(node) for node in NODES}
        sides[FRAME_PER_APPEND] = side("node", coalesce=False)
        return sides


_Medians = dict[str, dict[str, float]]


def _cell(
    runs: Runs, fields: dict[str, Any], figures: Callable[[_Medians], dict[str, float]]
) -> tuple[_Medians, dict[str, Any]]:
    """Every cell's record, whatever it measured: what it was given, each side's
    medians, the figures they make (ratios, added latencies), and the runs behind them."""
    medians = side_medians(runs)
    return medians, {**fields, **medians, **figures(medians), "runs": runs}


def _pipelined_cell(
    env: _Env,
    runs: Runs,
    base: str,
    fields: dict[str, Any],
    what: str,
) -> dict[str, Any]:
    """A cell's medians and node/base throughput ratios, announced on the way."""
    medians, cell = _cell(runs, fields, lambda m: carried_figures(m, base))
    env.target.progress(
        f"node-load {what}: {base} {medians[base]['per_s']:.0f}/s, "
        f"node {medians['node']['per_s']:.0f}/s ({cell[f'node_vs_{base}_ratio']}), at 100 % "
        f"{medians['node_full']['per_s']:.0f}/s ({cell[f'node_full_vs_{base}_ratio']})"
        + (
            f"; a frame per append {medians[FRAME_PER_APPEND]['per_s']:.0f}/s "
            f"({cell[f'{FRAME_PER_APPEND}_vs_{base}_ratio']})"
            if FRAME_PER_APPEND in medians
            else ""
        )
    )
    return cell


async def _latency(env: _Env, callers: int) -> dict[str, Any]:
    payload = b"l" * _LATENCY_PAYLOAD
    channel = f"bench-nl-lat-{env.run}"
    async with contextlib.AsyncExitStack() as held:
        wal_append = await env.wal(held, f"lat-{env.run}")
        own = await env.assigned(held, [channel])
        wal_side = Latest(spread([wal_append] * callers, payload))
        sides: dict[str, Timed] = {"wal": wal_side}
        for node, client in env.clients.items():
            (name,) = own[node]

            async def unary(data: bytes, client: NodeClient = client, name: str = name) -> object:
                return await client.produce(name, data)

            streams = env.streams(held, node, own[node], callers)
            pid = env.pids[node]
            sides[f"{node}_unary"] = metered(pid, spread([unary] * callers, payload))
            sides[f"{node}_stream"] = metered(pid, spread([s.append for s in streams], payload))
        calls = await held.enter_async_context(
            NodeClient(env.clients["node"].address, coalesce=False)
        )
        (name,) = own["node"]

        async def a_call_each(data: bytes) -> object:
            return await calls.produce(name, data)

        sides[CALLS_SIDE] = metered(env.pids["node"], spread([a_call_each] * callers, payload))
        echo_streams = [env.echo.open_stream() for _ in range(callers)]

        async def close_echo_streams() -> None:
            await asyncio.gather(*(s.close() for s in echo_streams), return_exceptions=True)

        held.push_async_callback(close_echo_streams)
        sides["echo_unary"] = metered(env.echo.pid, spread([env.echo.unary] * callers, payload))
        sides["echo_stream"] = metered(
            env.echo.pid, spread([s.append for s in echo_streams], payload)
        )
        sides["ceiling_unary"] = after(
            env.echo, wal_side, callers, spread([env.echo.unary_after] * callers, payload)
        )
        runs = await env.runs(sides)
    fields = {"payload_bytes": _LATENCY_PAYLOAD, "callers": callers}
    medians, cell = _cell(runs, fields, latency_figures)
    env.target.progress(
        "node-load latency x{}: wal p50 {} p99 {} ms; node unary +{} / +{} ms, stream +{} / "
        "+{} ms; echo unary p50 {} ms; CPU us/append unary {} stream {} (echo {} / {}); "
        "unary ceiling/WAL {}; unary/WAL {}, a call per append {}".format(
            callers, medians["wal"]["p50_ms"], medians["wal"]["p99_ms"],
            cell["node_unary_added_p50_ms"], cell["node_unary_added_p99_ms"],
            cell["node_stream_added_p50_ms"], cell["node_stream_added_p99_ms"],
            medians["echo_unary"]["p50_ms"], medians["node_unary"][CPU_KEY],
            medians["node_stream"][CPU_KEY], medians["echo_unary"][CPU_KEY],
            medians["echo_stream"][CPU_KEY], cell["ceiling_unary_vs_wal_ratio"],
            cell["node_unary_vs_wal_ratio"], cell[f"{CALLS_SIDE}_vs_wal_ratio"],
        )
    )  # fmt: skip
    return cell


async def _carried(env: _Env, size: int, streams: int, depth: int) -> dict[str, Any]:
    payload = b"c" * size
    name = f"{env.run}-{size}"
    channel = f"bench-nl-load-{name}"
    async with contextlib.AsyncExitStack() as held:
        wal_append = await env.wal(held, f"load-{name}")
        own = await env.assigned(held, [channel])
        sides: dict[str, Timed] = {"wal": spread([wal_append] * (streams * depth), payload)}
        sides.update(env.node_sides(held, own, streams, depth, payload))
        runs = await env.runs(sides)
    fields = {"payload_bytes": size, "streams": streams, "depth": depth}
    return _pipelined_cell(env, runs, "wal", fields, f"carried {size} B, {streams} x {depth}")


async def _large(env: _Env, size: int, callers: int) -> dict[str, Any]:
    payload = large_message(size)
    name = f"{env.run}-{size}"
    channel = f"bench-nl-large-{name}"
    async with contextlib.AsyncExitStack() as held:
        producer = await raw_producer(env.raw, env.config.topic(f"bench-nl-raw-{name}"), env.config)
        held.push_async_callback(producer.close)
        own = await env.assigned(held, [channel])

        raw_append, pieces = raw_pieces(producer, payload, DEFAULT_RAW_MESSAGE_BYTES)
        raw_side = Latest(in_mb(spread([raw_append] * callers, payload), size))
        sides: dict[str, Timed] = {"raw": raw_side}
        for node, client in env.clients.items():
            (own_name,) = own[node]

            async def unary(
                data: bytes, client: NodeClient = client, name: str = own_name
            ) -> object:
                return await client.produce(name, data)

            sides[node] = in_mb(metered(env.pids[node], spread([unary] * callers, payload)), size)
        echo = env.echo
        sides["echo"] = in_mb(metered(echo.pid, spread([echo.unary] * callers, payload)), size)
        sides["ceiling"] = in_mb(
            after(echo, raw_side, callers, spread([echo.unary_after] * callers, payload)), size
        )
        runs = await env.runs(sides)

    def figures(m: _Medians) -> dict[str, float]:
        ceiling = ratio(m["ceiling"]["mb_per_s"], m["raw"]["mb_per_s"])
        return {**carried_figures(m, "raw"), "ceiling_vs_raw_ratio": ceiling}

    fields = {"message_bytes": size, "callers": callers, "raw_messages_per_message": pieces}
    medians, cell = _cell(runs, fields, figures)
    env.target.progress(
        f"node-load large {size // KiB} KiB x{callers}: raw {medians['raw']['mb_per_s']} MB/s, "
        f"node {medians['node']['mb_per_s']} ({cell['node_vs_raw_ratio']}), at 100 % "
        f"{medians['node_full']['mb_per_s']} ({cell['node_full_vs_raw_ratio']}); ceiling "
        f"{cell['ceiling_vs_raw_ratio']}; CPU us/append node {medians['node'][CPU_KEY]}, "
        f"echo {medians['echo'][CPU_KEY]}"
    )
    return cell


async def _channels(env: _Env, n: int, appenders: int, depth: int) -> dict[str, Any]:
    payload = b"m" * _LATENCY_PAYLOAD
    name = f"{env.run}-{n}"
    names = [f"bench-nl-ch-{name}-{i}" for i in range(n)]
    async with contextlib.AsyncExitStack() as held:
        producers = await bounded(
            [
                lambda i=i: raw_producer(  # type: ignore[misc]
                    env.raw, env.config.topic(f"bench-nl-chraw-{name}-{i}"), env.config
                )
                for i in range(n)
            ]
        )

        async def close_producers() -> None:
            await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)

        held.push_async_callback(close_producers)
        own = await env.assigned(held, names)
        raw_appends: list[Append] = [
            producers[i % n].send for i in range(appenders) for _ in range(depth)
        ]
        sides: dict[str, Timed] = {"raw": spread(raw_appends, payload)}
        sides.update(env.node_sides(held, own, appenders, depth, payload))
        runs = await env.runs(sides)
    fields = {"channels": n, "appenders": appenders, "depth": depth}
    return _pipelined_cell(env, runs, "raw", fields, f"channels {n}, {appenders} x {depth}")


async def _batches(env: _Env, batch: int, callers: int) -> dict[str, Any]:
    payload = b"b" * _LATENCY_PAYLOAD
    channel = f"bench-nl-batch-{env.run}"
    async with contextlib.AsyncExitStack() as held:
        wal = await open_wal(
            env.opener, f"bench-nl-wal-batch-{env.run}", env.tso.allocator(), node_id=1
        )
        held.push_async_callback(wal.close)
        own = await env.assigned(held, [channel])
        messages = [MutableMessage(MessageType.INSERT, payload)] * batch
        payloads = [payload] * batch

        def batches(send: Callable[[], Awaitable[object]]) -> Timed:
            async def run(seconds: float) -> dict[str, float]:
                return await timed_batches(send, batch, callers, seconds)

            return run

        sides: dict[str, Timed] = {"wal": batches(lambda: wal.append_many(messages))}
        for node, client in env.clients.items():
            (own_name,) = own[node]

            async def send(client: NodeClient = client, name: str = own_name) -> object:
                return await client.produce_batch(name, payloads)

            sides[node] = metered(env.pids[node], batches(send), ops_key="messages")
        runs = await env.runs(sides)
    fields = {"payload_bytes": _LATENCY_PAYLOAD, "batch": batch, "callers": callers}
    return _pipelined_cell(env, runs, "wal", fields, f"batches {callers} x {batch}")
