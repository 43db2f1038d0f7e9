"""``streamwal demo`` (what the README's run command runs) passes on the shared stack.

The demo is run as a user runs it, as a process; it reuses the running stack (its
``stack up`` only checks what already runs) and never stops it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import urllib.request

import pytest

from node.stack import StackInfo
from node.stack.process import port_in_use

pytestmark = pytest.mark.integration


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert isinstance(body, dict)
    return body


async def test_demo_passes_and_links_a_real_trace(telemetry_stack: StackInfo) -> None:
    info = telemetry_stack
    assert info.jaeger_url
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "node.cli",
        "demo",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=os.environ.copy(),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode(errors="replace")
    shown = f"stdout:\n{text[-4000:]}\nstderr:\n{err.decode(errors='replace')[-2000:]}"
    assert proc.returncode == 0, shown
    assert "WARNING" not in text, shown
    assert "node 1's client gets FAILED_PRECONDITION" in text, shown
    found = re.search(r"trace: (\S+)/trace/([0-9a-f]{32})\b", text)
    assert found, shown
    assert found.group(1) == info.jaeger_url.rstrip("/")
    trace_id = found.group(2)
    wanted = {"wal.open", "wal.first_time_tick.attempt"}
    for _ in range(20):  # the demo saw the trace; later batches of it may still travel
        body = await asyncio.to_thread(_get_json, f"{found.group(1)}/api/traces/{trace_id}")
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
    move = re.search(r"move trace: \S+/trace/([0-9a-f]{32})\b", text)
    assert move, shown
    body = await asyncio.to_thread(_get_json, f"{found.group(1)}/api/traces/{move.group(1)}")
    data = body.get("data")
    assert isinstance(data, list) and data, body
    servers = [
        tags
        for span in data[0]["spans"]
        if (tags := {t["key"]: t["value"] for t in span["tags"]}).get("span.kind") == "server"
        and span["operationName"].endswith("/AssignChannel")
    ]
    assert [int(t["streamwal.node.id"]) for t in servers] == [2], servers
    for process in data[0]["processes"].values():
        assert "streamwal.node.id" not in {t["key"] for t in process.get("tags", [])}, process
    # the shared stack is still up
    for endpoint in (info.pulsar_url, info.etcd_endpoint):
        assert port_in_use(int(endpoint.rsplit(":", 1)[1])), endpoint
