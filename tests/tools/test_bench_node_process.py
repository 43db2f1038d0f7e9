"""The bench's child node: reaped when its stop is cancelled, and observed as a deployed node is."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal.node.client import NodeClient
from streamwal.node.trace.query import find_traces
from streamwal_lab.bench.node_process import BenchNode
from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration


async def test_a_stop_cancelled_midway_still_reaps_the_node(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    target = BenchTarget(stack.pulsar_url, stack.etcd_endpoint, stack.pulsar_admin_url)
    prefix = etcd_prefix("bench-proc")
    node = BenchNode(target, key_prefix=prefix, log_path=tmp_path / "node.log")
    await node.__aenter__()
    proc = node._proc
    assert proc is not None and proc.returncode is None

    stopping = asyncio.create_task(node.__aexit__(None, None, None))
    await asyncio.sleep(0)  # the stop sends SIGTERM and starts waiting for the exit
    assert not stopping.done() and proc.returncode is None
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert proc.returncode is not None  # waited for, not left to the garbage collector
    assert node.log_path.exists()  # a stop that did not finish keeps what explains it


async def test_the_node_records_metrics_and_exports_traces_as_a_deployed_node_does(
    telemetry_stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    stack = telemetry_stack
    assert stack.otlp_endpoint and stack.jaeger_url
    target = BenchTarget(
        stack.pulsar_url,
        stack.etcd_endpoint,
        stack.pulsar_admin_url,
        otlp_endpoint=stack.otlp_endpoint,
    )
    service = f"streamwal-bench-node-{uuid.uuid4().hex[:8]}"
    channel = f"bench-telemetry-{uuid.uuid4().hex[:8]}"
    async with BenchNode(
        target,
        key_prefix=etcd_prefix("bench-telemetry"),
        log_path=tmp_path / "node.log",
        extra_env={"STREAMWAL_TELEMETRY__SERVICE_NAME": service},
    ) as node:
        assert node.metrics_url.startswith("http://127.0.0.1:"), node.log_tail()
        async with NodeClient(node.address) as client:
            await client.assign(channel)
            await client.produce(channel, b"traced and counted")
        text = await asyncio.to_thread(_get, node.metrics_url)
        assert "streamwal_wal_append_duration" in text, text[:2000]
    assert node.exit_code == 0
    assert not node.log_path.exists()  # a clean stop leaves no file behind
    # the node's spans reached Jaeger through the collector
    traces = await find_traces(
        stack.jaeger_url, service, operation="wal.open", min_spans=1, timeout=60
    )
    assert traces


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode())
