"""``streamwal demo``: the main job, on the local stack; its first part.

The second part, a self-managing cluster that fails over, is
:mod:`streamwal_lab.demo_cluster` (``--part`` runs one of them alone).

Two nodes share one TSO (node 1 runs the oracle, node 2 asks it over gRPC). Node 1
reaches the broker through a fault proxy that starts closed, so its first channel
open retries a few times before the broker "comes back"; that open's trace in Jaeger
shows each attempt. Then channels are written, one is moved to node 2 (node 1 is
fenced and its client gets FAILED_PRECONDITION), everything is read back, and the
checker verifies the log against the acknowledgements the client recorded.

Both nodes run in this one process beside the demo's client, yet Jaeger shows three
processes: the demo's own spans are ``streamwal-client``'s, and each node makes its
spans with a provider of its own (``setup_telemetry(one_node=False)`` and
:meth:`~streamwal.node.telemetry.Telemetry.node_tracer_provider`), whose resource names
it (``streamwal-node``, ``service.instance.id`` ``node-<id>``) and which puts
``streamwal.node.id`` on every span. Sampling is the default a deployment gets: the
open and the move are lifecycle spans, kept whatever the ratio, and the demo's single
appends are sampled like anyone's. The move runs under one ``cluster.move`` span (the
balancer's name; its reason here is the operator's request), so Jaeger holds it as one
trace from the request to node 2's first time tick and node 1's refused write. At
its end the demo prints, from Jaeger, the open's and the move's waterfalls with the
node of each span; it gives their Jaeger URLs only when that Jaeger serves a UI, and
otherwise says there is none.

Exit status 1 (and a line marked ``!!``) when what the demo shows did not happen:
node 1 could still write, or its client got anything but FAILED_PRECONDITION, or
the read-back or the checker missed an acknowledged message. A missing collector or
Jaeger, or a trace Jaeger does not hold, is a WARNING: nothing is wrong with the log,
but no trace can be shown.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import uuid
from collections.abc import Callable
from typing import Any

import grpc
from opentelemetry.trace import get_tracer
from opentelemetry.util.types import Attributes

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.node.client import NodeClient, policy
from streamwal.node.config import load_config
from streamwal.node.telemetry import NODE_ID_ATTRIBUTE, setup_telemetry
from streamwal.node.trace.model import span_status
from streamwal.node.trace.opens import ATTEMPT_OPERATION
from streamwal.node.trace.query import SpanSummary, get_trace, span_summaries
from streamwal.server.runtime import Node
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import read_topic
from streamwal.verify.history import check_history
from streamwal_lab.demo_common import delete_demo_topics, say, stack_up, trace_link, warn, waterfall
from streamwal_lab.faultproxy import FaultProxy
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.jaeger_ui import ui_is_real
from streamwal_lab.stack.paths import ENV_JAEGER_UI_ASSETS
from streamwal_lab.stack.ports import export_environment
from streamwal_lab.stack.tso_keys import deleted_afterwards

__all__ = ["MOVE_OPERATION", "MOVE_REASON", "register"]

#: the span of a whole move, from the request to the old owner's refused write: the
#: balancer's name for a move, with its attributes (docs/traces.md)
MOVE_OPERATION = "cluster.move"
#: why the demo moves the channel, as ``streamwal.cluster.reason`` says it
MOVE_REASON = "operator request"

_tracer = get_tracer(__name__)

_UNREACHABLE_S = 3.0
_READ_BACK_S = 30.0
_TRACE_WAIT_S = 20.0


def register(sub: Any) -> None:
    demo = sub.add_parser(
        "demo",
        help="start the local stack and run the demo: a move between two nodes, then "
        "a self-managing cluster that fails over",
    )
    demo.add_argument(
        "--part",
        choices=("all", "move", "cluster"),
        default="all",
        help="move: two nodes, a channel moved and its old owner fenced; cluster: three "
        "node processes that run themselves, a channel's owner killed, the failover's "
        "trace and duration (default: both, in that order)",
    )
    demo.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    export_environment()  # the nodes it starts default to the stack's ports
    # the demo's own narration goes to stdout; keep library logs to warnings
    logging.getLogger().setLevel(logging.WARNING)
    code = 0
    if args.part in ("all", "move"):
        code = asyncio.run(_demo())
    if args.part in ("all", "cluster") and code == 0:
        # loaded on use: `streamwal --help` loads this module, not the cluster runner
        from streamwal_lab.demo_cluster import cluster_demo

        code = asyncio.run(cluster_demo())
    return code


async def _demo() -> int:
    info, traced = await stack_up()
    run = uuid.uuid4().hex[:6]
    env = {
        "STREAMWAL_NODE__LISTEN": "127.0.0.1:0",
        "STREAMWAL_NODE__METRICS_LISTEN": "",
        "STREAMWAL_ETCD__ENDPOINTS": info.etcd_endpoint,
        "STREAMWAL_TSO__KEY_PREFIX": f"/streamwal-demo-{run}",
        "STREAMWAL_PULSAR__OPERATION_TIMEOUT_S": "1",
        "STREAMWAL_TELEMETRY__OTLP_ENDPOINT": (info.otlp_endpoint or "") if traced else "",
    }
    base = load_config(environ={**os.environ, **env})
    telemetry = setup_telemetry(base, one_node=False)  # two nodes in this process
    broker_port = int(info.pulsar_url.rsplit(":", 1)[1])
    async with (
        deleted_afterwards(info.etcd_endpoint, [base.tso.key_prefix]),
        FaultProxy(broker_port) as proxy,
    ):
        one_cfg = load_config(
            environ={
                **os.environ,
                **env,
                "STREAMWAL_NODE__ID": "1",
                "STREAMWAL_PULSAR__SERVICE_URL": f"pulsar://{proxy.url_host}",
            }
        )
        async with Node(one_cfg, tracer_provider=telemetry.node_tracer_provider(one_cfg)) as one:
            two_cfg = load_config(
                environ={
                    **os.environ,
                    **env,
                    "STREAMWAL_NODE__ID": "2",
                    "STREAMWAL_PULSAR__SERVICE_URL": info.pulsar_url,
                    "STREAMWAL_TSO__MODE": "remote",
                    "STREAMWAL_TSO__REMOTE_ADDRESSES": one.address,
                }
            )
            async with Node(
                two_cfg, tracer_provider=telemetry.node_tracer_provider(two_cfg)
            ) as two:
                say(f"== node 1 on {one.address} (runs the TSO), node 2 on {two.address}")
                code, trace_id, move_trace_id = await _scenario(one, two, proxy, info, run)
    telemetry.shutdown()
    await delete_demo_topics(info, [f"demo-a-{run}", f"demo-b-{run}"])
    if code != 0:
        say("== the demo FAILED (see the lines marked !! above)")
        return code
    if not traced or not info.jaeger_url:
        warn("no Jaeger to show the open's trace in")
    elif not trace_id:
        warn("the open carried no trace id (tracing off?): no trace URL to give")
    else:
        await _show_traces(info.jaeger_url, trace_id, move_trace_id)
    return code


async def _scenario(
    one: Node, two: Node, proxy: FaultProxy, info: StackInfo, run: str
) -> tuple[int, str, str]:
    """The exit code, and the trace ids of the first open and of the move."""
    a, b = f"demo-a-{run}", f"demo-b-{run}"
    acks: dict[str, list[Ack]] = {a: [], b: []}
    async with NodeClient(one.address) as c1, NodeClient(two.address) as c2:
        say(f"== the broker is unreachable from node 1; assigning {a} to node 1")
        proxy.set_mode("refuse")
        assign = asyncio.create_task(c1.assign(a))
        await asyncio.sleep(_UNREACHABLE_S)
        say("   ...the broker is back")
        proxy.set_mode("pass")
        opened = await assign
        say(
            f"   {a} open on node 1: first time tick {opened.first_time_tick} "
            f"at {opened.first_message_id_text}"
        )
        await c1.assign(b)
        say(f"== node 1 owns {a} and {b}; appending 5 messages to each")
        for channel in (a, b):
            for i in range(5):
                payload = f"{channel}/n1-{i}".encode()
                ack = await c1.produce(channel, payload, vchannel=f"{channel}-v{i % 2}")
                acks[channel].append(Ack(ack.message_id, ack.time_tick, digest(payload)))
                say(
                    f"   {channel} <- {payload.decode():<22} tt={ack.time_tick} "
                    f"id={ack.message_id_text}"
                )
        say(f"== moving {a} to node 2 (node 2 opens it: the broker fences node 1)")
        # one trace for the whole move: the request, node 2's open and first time tick,
        # and node 1's refused write
        move: Attributes = {
            "streamwal.channel": a,
            "streamwal.cluster.reason": MOVE_REASON,
            "streamwal.cluster.from": 1,
            "streamwal.cluster.to": 2,
        }
        with _tracer.start_as_current_span(MOVE_OPERATION, attributes=move):
            moved = await c2.assign(a)
            say(
                f"   node 2 first time tick {moved.first_time_tick} > node 1's last "
                f"{acks[a][-1].time_tick}: {moved.first_time_tick > acks[a][-1].time_tick}"
            )
            try:
                await c1.produce(a, b"too late")
                say("   !! node 1 could still write: the fence did not hold")
                return 1, opened.trace_id, moved.trace_id
            except grpc.aio.AioRpcError as exc:
                say(f"   node 1's client gets {exc.code().name}: {exc.details()}")
                if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    say("   !! expected FAILED_PRECONDITION: the move was not reported as a fence")
                    return 1, opened.trace_id, moved.trace_id
        listing = await c1.list_channels()
        say(
            f"   node 1 now owns {[c.pchannel for c in listing.channels if not c.fenced]}, "
            f"reports fenced {list(listing.fenced)}"
        )
        for i in range(3):
            payload = f"{a}/n2-{i}".encode()
            ack = await c2.produce(a, payload)
            acks[a].append(Ack(ack.message_id, ack.time_tick, digest(payload)))
            say(f"   {a} <- {payload.decode():<22} tt={ack.time_tick} id={ack.message_id_text}")
        say(f"== reading {a} back from node 2")
        seen: set[bytes] = set()
        try:
            async for m in c2.consume(a, policy("all"), timeout=_READ_BACK_S):
                say(
                    f"   {m.message_id_text:>9}  tt={m.time_tick}  node {m.source_node_id}  "
                    f"{m.type:<8} {m.payload.decode(errors='replace')}"
                )
                seen.add(m.message_id)
                if m.message_id == acks[a][-1].message_id:
                    break
        except grpc.aio.AioRpcError as exc:
            say(f"   !! the read-back ended early: {exc.code().name}: {exc.details()}")
        missed = [ack for ack in acks[a] if ack.message_id not in seen]
        if missed:
            say(f"   !! the read-back missed {len(missed)} acknowledged message(s)")
            return 1, opened.trace_id, moved.trace_id
        say(f"   all {len(acks[a])} acknowledged messages read back")
        say("== checking both logs with a plain Pulsar reader")
        ok = True
        for channel in (a, b):
            raw = await read_topic(info.pulsar_url, f"persistent://public/default/{channel}")
            report = check_history(raw, PulsarMessageId.from_bytes, acks[channel])
            say(f"   {channel}: " + report.summary().replace("\n", "\n      "))
            ok = ok and report.ok
        return (0 if ok else 1), opened.trace_id, moved.trace_id


async def _served_trace(jaeger_url: str, trace_id: str) -> dict[str, Any] | None:
    """An AssignChannel trace once Jaeger holds its ``wal.open`` and the node's server
    span (a trace's spans arrive in batches); ``None`` if it never does within the wait."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _TRACE_WAIT_S
    while True:
        remaining = max(deadline - loop.time(), 0.1)
        trace = await get_trace(jaeger_url, trace_id, operation="wal.open", timeout=remaining)
        if trace is None:
            return None
        if _server_node(span_summaries(trace)) is not None or loop.time() > deadline:
            return trace
        await asyncio.sleep(0.5)


def _server_node(spans: list[SpanSummary]) -> Any:
    """The node id on the trace's server span: which node did the work."""
    return next(
        (
            s.tags[NODE_ID_ATTRIBUTE]
            for s in spans
            if s.tags.get("span.kind") == "server" and NODE_ID_ATTRIBUTE in s.tags
        ),
        None,
    )


def _open_node(spans: list[SpanSummary]) -> Any:
    return next((s.tags.get(NODE_ID_ATTRIBUTE) for s in spans if s.operation == "wal.open"), None)


async def _show_traces(jaeger_url: str, trace_id: str, move_trace_id: str) -> None:
    """The open's and the move's waterfalls; their Jaeger URLs only where Jaeger has a
    UI to show them in (a Go-built Jaeger serves a placeholder page instead)."""
    ui_real = await asyncio.to_thread(ui_is_real, jaeger_url)
    await _show_open(jaeger_url, trace_id, ui_real)
    if move_trace_id:
        await _show_move(jaeger_url, move_trace_id, ui_real)
    if not ui_real:
        say(
            f"== no Jaeger UI to browse these traces in: Jaeger at {jaeger_url} was built "
            "from its Go module, which has no UI assets, so a browser gets a placeholder "
            "page there, not the trace"
        )
        say(
            "   the waterfalls above are the traces; `streamwal trace show TRACE_ID` prints "
            "one again, and `streamwal trace opens` ranks recent opens"
        )
        if os.environ.get(ENV_JAEGER_UI_ASSETS):
            say(
                f"   {ENV_JAEGER_UI_ASSETS} is set, but the running Jaeger was started without "
                "it: restart Jaeger (`streamwal stack down --only jaeger && streamwal stack up`)"
            )
        else:
            say(
                f"   for the UI: set {ENV_JAEGER_UI_ASSETS} to built jaeger-ui assets (a folder "
                "or an archive) and restart Jaeger, or install the stack where Jaeger's release "
                "archive can be downloaded (it has the UI built in)"
            )
    sys.stdout.flush()


async def _show_open(jaeger_url: str, trace_id: str, ui_real: bool | None) -> None:
    def describe(spans: list[SpanSummary]) -> str:
        attempts = [s for s in spans if s.operation == ATTEMPT_OPERATION]
        failed = [s for s in attempts if span_status(s) == "error"]
        return (
            f"served by node {_server_node(spans)}, opened as node {_open_node(spans)}: "
            f"{len(attempts)} first-time-tick attempts, {len(failed)} failed before the "
            "broker came back"
        )

    # the open's own span ends last, after every attempt span it holds
    what = "the open of the first channel"
    await _show_trace(jaeger_url, trace_id, ui_real, what, "trace", describe)


async def _show_move(jaeger_url: str, trace_id: str, ui_real: bool | None) -> None:
    def describe(spans: list[SpanSummary]) -> str:
        return f"served by node {_server_node(spans)}, opened as node {_open_node(spans)}"

    await _show_trace(jaeger_url, trace_id, ui_real, "the move to node 2", "move trace", describe)


async def _show_trace(
    jaeger_url: str,
    trace_id: str,
    ui_real: bool | None,
    what: str,
    label: str,
    describe: Callable[[list[SpanSummary]], str],
) -> None:
    """``what``'s trace once Jaeger serves it: ``describe``'s line, the waterfall and a
    link named ``label``; a warning where Jaeger does not hold it."""
    say(f"== {what}, as Jaeger holds it")
    trace = await _served_trace(jaeger_url, trace_id)
    if trace is None:
        warn(f"Jaeger at {jaeger_url} does not hold trace {trace_id}: no {label} to show")
        return
    say("   " + describe(span_summaries(trace)))
    waterfall(trace)
    say(f"   {label}: {trace_link(jaeger_url, trace_id, ui_real)}")
