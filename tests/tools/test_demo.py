"""``streamwal demo`` (what the README's run command runs) passes on the shared stack.

The demo is run as a user runs it, as a process; it reuses the running stack (its
``stack up`` only checks what already runs) and never stops it.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request

import pytest

from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.jaeger_ui import is_placeholder
from streamwal_lab.stack.process import port_in_use
from streamwal_lab.stack.topics import list_topics
from tests.node.processes import run_python
from tests.node.processes import shown as shown_of

pytestmark = pytest.mark.integration


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


def move_channel(text: str) -> str:
    found = re.search(r"== moving (demo-a-[0-9a-f]{6}) to node 2", text)
    assert found, text
    return found.group(1)


def _get_json(url: str) -> dict[str, object]:
    body = json.loads(_get(url))
    assert isinstance(body, dict)
    return body


async def test_demo_passes_and_shows_a_real_trace(telemetry_stack: StackInfo) -> None:
    info = telemetry_stack
    assert info.jaeger_url
    # the cluster part has its own test (test_demo_cluster.py)
    code, text, err = await run_python("-m", "streamwal.cli", "demo", "--part", "move", timeout=180)
    shown = shown_of(text, err)
    assert code == 0, shown
    assert "WARNING" not in text, shown
    assert "node 1's client gets FAILED_PRECONDITION" in text, shown
    # the demo's two channels were checked, then deleted off the dev broker
    channels = set(re.findall(r"\bdemo-[ab]-[0-9a-f]{6}\b", text))
    assert len(channels) == 2, shown
    left = {t.rsplit("/", 1)[-1] for t in await list_topics(info.pulsar_admin_url)}
    assert not channels & left, channels & left
    # a trace URL only where Jaeger has a UI to show it in; otherwise the demo says so
    ui_real = not is_placeholder(await asyncio.to_thread(_get, f"{info.jaeger_url}/"))
    if ui_real:
        found = re.search(r"trace: (\S+)/trace/([0-9a-f]{32})\b", text)
        move = re.search(r"move trace: \S+/trace/([0-9a-f]{32})\b", text)
    else:
        assert "/trace/" not in text, shown
        assert "no Jaeger UI to browse these traces in" in text, shown
        found = re.search(r"trace: ()([0-9a-f]{32}) \(`streamwal trace show \2`\)", text)
        move = re.search(r"move trace: ([0-9a-f]{32})\b", text)
    assert found, shown
    assert found.group(1) in ("", info.jaeger_url.rstrip("/"))
    trace_id = found.group(2)
    # the open's waterfall: each attempt a line, the failed ones with their error below
    attempt_lines = [line for line in text.splitlines() if "`- wal.first_time_tick.attempt" in line]
    assert len(attempt_lines) >= 2, shown
    assert " ERROR " in attempt_lines[0] and "attempt=1 backoff_ms=0" in attempt_lines[0], shown
    assert "time_tick=" in attempt_lines[-1] and "message_id=" in attempt_lines[-1], shown
    wanted = {"wal.open", "wal.first_time_tick.attempt"}
    for _ in range(20):  # the demo saw the trace; later batches of it may still travel
        body = await asyncio.to_thread(_get_json, f"{info.jaeger_url}/api/traces/{trace_id}")
        data = body.get("data")
        assert isinstance(data, list) and data and data[0]["traceID"] == trace_id, body
        operations = {span["operationName"] for span in data[0]["spans"]}
        if wanted <= operations:
            break
        await asyncio.sleep(0.5)
    assert wanted <= operations, operations
    # both nodes run in the demo's process: each server span names its own node, and
    # the shared resource names none (it would be wrong for one of them)
    assert "served by node 1, opened as node 1:" in text, shown
    assert "served by node 2, opened as node 2" in text, shown
    assert move, shown
    # the move is one trace: the request, node 2's open down to its first time tick,
    # node 1's refused write; each node-side span names its node
    wanted = {"cluster.move", "wal.open", "wal.first_time_tick.attempt"}
    for _ in range(20):
        body = await asyncio.to_thread(_get_json, f"{info.jaeger_url}/api/traces/{move.group(1)}")
        data = body.get("data")
        assert isinstance(data, list) and data, body
        spans = [
            (span["operationName"], {t["key"]: t["value"] for t in span["tags"]})
            for span in data[0]["spans"]
        ]
        refused = [t for op, t in spans if op.endswith("/Produce") and t["span.kind"] == "server"]
        if wanted <= {op for op, _ in spans} and refused:
            break
        await asyncio.sleep(0.5)
    assert wanted <= {op for op, _ in spans}, spans
    (first,) = [t for op, t in spans if op == "wal.first_time_tick.attempt"]
    assert int(first["streamwal.node.id"]) == 2 and "wal.time_tick" in first, first
    assert first["wal.channel"] == move_channel(text), first
    assert [int(t["streamwal.node.id"]) for t in refused] == [1], refused
    assert isinstance(data, list)
    servers = [
        tags
        for span in data[0]["spans"]
        if (tags := {t["key"]: t["value"] for t in span["tags"]}).get("span.kind") == "server"
        and span["operationName"].endswith("/AssignChannel")
    ]
    assert [int(t["streamwal.node.id"]) for t in servers] == [2], servers
    # three processes: the demo's client and each node, told apart by their resource
    processes = {
        (p["serviceName"], tags.get("service.instance.id") if "streamwal.node.id" in tags else None)
        for p in data[0]["processes"].values()
        for tags in [{t["key"]: t["value"] for t in p.get("tags", [])}]
    }
    assert processes == {
        ("streamwal-client", None),
        ("streamwal-node", "node-1"),
        ("streamwal-node", "node-2"),
    }, processes
    # node 1's refused write is an error on its server span, with the domain error
    (refused_span,) = [
        span
        for span in data[0]["spans"]
        if span["operationName"].endswith("/Produce")
        and {t["key"]: t["value"] for t in span["tags"]}["span.kind"] == "server"
    ]
    refused_tags = {t["key"]: t["value"] for t in refused_span["tags"]}
    assert refused_tags.get("otel.status_code") == "ERROR", refused_tags
    kinds = [
        {f["key"]: f["value"] for f in log["fields"]}.get("exception.type", "")
        for log in refused_span["logs"]
    ]
    assert kinds and all(k.endswith("ChannelFencedError") for k in kinds), kinds
    (decision,) = [t for op, t in spans if op == "cluster.move"]
    assert decision["streamwal.cluster.reason"] == "operator request", decision
    # the shared stack is still up
    for endpoint in (info.pulsar_url, info.etcd_endpoint):
        assert port_in_use(int(endpoint.rsplit(":", 1)[1])), endpoint
