"""What an operator sees from one real node process (issue 28): a start that cannot
work stops at once with one line, the HTTP port answers only at its paths, readiness
means the broker was reached, and typo'd channel names are refused or reported
missing without a topic appearing on the broker."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from streamwal.node.client import NodeClient
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, free_port, streamwal_cli

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _settings(stack: StackInfo, prefix: str, **pulsar: Any) -> dict[str, Any]:
    return {
        "pulsar": {"service_url": stack.pulsar_url, **pulsar},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "tso": {"key_prefix": prefix},
    }


def _serve(node: NodeProcess, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamwal.cli", "serve", "--config", str(node.config_path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _stderr_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


def _held_port(*, reuse: bool) -> socket.socket:
    """A listening socket on a free port; ``reuse``: with SO_REUSEPORT, as every gRPC
    server sets it by default (a second gRPC server could then share the port)."""
    sock = socket.socket()
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _only_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refused start (log lines have a timestamp; tracebacks none)."""
    errors = [line for line in _stderr_lines(done) if "cannot start the node" in line]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr and "ready on" not in done.stdout, done
    return errors[0]


async def test_a_taken_grpc_port_stops_the_node_with_one_line(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    with _held_port(reuse=True) as held:
        port = held.getsockname()[1]
        node = NodeProcess(tmp_path, 1, _settings(stack, etcd_prefix("grpc-port")), port=port)
        done = await asyncio.to_thread(_serve, node)
    assert done.returncode == 1, done
    line = _only_error_line(done)
    assert f"gRPC address 127.0.0.1:{port} is already in use" in line, line
    assert "add_port" not in done.stderr  # no gRPC core line beside ours


async def test_a_taken_metrics_port_stops_the_node_with_one_line(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    with _held_port(reuse=False) as held:
        port = held.getsockname()[1]
        settings = _settings(stack, etcd_prefix("metrics-port"))
        settings["node"] = {"metrics_listen": f"127.0.0.1:{port}"}
        node = NodeProcess(tmp_path, 1, settings)
        done = await asyncio.to_thread(_serve, node)
    assert done.returncode == 1, done
    line = _only_error_line(done)
    assert f"metrics address 127.0.0.1:{port} is already in use" in line, line


async def test_an_unreachable_etcd_stops_the_node_with_one_line(
    stack: StackInfo, tmp_path: Path
) -> None:
    settings = _settings(stack, "/unused")
    settings["etcd"] = {"endpoints": [f"127.0.0.1:{free_port()}"]}
    node = NodeProcess(tmp_path, 1, settings)
    done = await asyncio.to_thread(_serve, node)
    assert done.returncode == 1, done
    line = _only_error_line(done)
    assert "etcd" in line and "no answer" in line, line


async def test_http_endpoints_answer_at_their_paths_only_and_health_names_every_service(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    port = free_port()
    settings = _settings(stack, etcd_prefix("endpoints"))
    settings["node"] = {"metrics_listen": f"127.0.0.1:{port}"}
    node = NodeProcess(tmp_path, 1, settings)
    await node.start()
    try:
        base = f"http://127.0.0.1:{port}"
        status, body = await asyncio.to_thread(_get, base + "/metrics")
        assert status == 200 and "# TYPE" in body
        assert await asyncio.to_thread(_get, base + "/livez") == (200, "ok\n")
        ready = await asyncio.to_thread(_get, base + "/readyz")
        assert ready == (200, "ready\n"), (ready, node.log_text())
        for path in ("/", "/healthz", "/ready", "/foo", "/metrics/x"):
            status, body = await asyncio.to_thread(_get, base + path)
            assert status == 404, (path, status)
            assert "# TYPE" not in body
        async with grpc.aio.insecure_channel(node.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            services = (
                "",
                "streamwal.v1.StreamingNode",
                "streamwal.cluster.v1.ClusterRouting",
                "streamwal.tso.v1.TSO",  # this node leads its own TSO prefix
            )
            for service in services:
                for _ in range(20):  # the TSO's health follows leadership every 0.5 s
                    reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                    await asyncio.sleep(0.1)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
    finally:
        assert await node.terminate() == 0


async def test_a_node_with_a_wrong_broker_url_is_not_ready_and_says_why(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    port, dead = free_port(), free_port()
    settings = _settings(stack, etcd_prefix("wrong-broker"), operation_timeout_s=1)
    settings["pulsar"]["service_url"] = f"pulsar://127.0.0.1:{dead}"
    settings["node"] = {"metrics_listen": f"127.0.0.1:{port}"}
    node = NodeProcess(tmp_path, 1, settings)
    with pytest.raises(TimeoutError):
        await node.start(timeout=8)  # never "ready on"
    try:
        status, body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/readyz")
        assert status == 503, body
        assert f"connection refused at 127.0.0.1:{dead}" in body, body
        assert "streamwal-exclusivity-probe-" in body and "(exclusivity probe)" not in body
        assert (await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/livez"))[0] == 200
        async with grpc.aio.insecure_channel(node.address) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="streamwal.v1.StreamingNode")
            )
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        log = node.log_text()
        assert "listening on" in log and "ready on" not in log
        # said once, not at every try (the probe topic differs each time)
        assert log.count("not ready: broker") == 1, log
    finally:
        assert await node.terminate() == 0


def _topic_exists(stack: StackInfo, channel: str) -> bool:
    url = f"{stack.pulsar_admin_url}/admin/v2/persistent/public/default/{channel}/subscriptions"
    return _get(url)[0] == 200


async def test_missing_channels_are_reported_missing_and_no_topic_is_created(
    stack: StackInfo, unique: str
) -> None:
    channel = f"typo-{unique}"
    for command in (
        ["verify", "--channel", channel, "--pulsar", stack.pulsar_url],
        ["channel", "status", channel, "--pulsar", stack.pulsar_url],
    ):
        done = await streamwal_cli(*command, timeout=60)
        assert done.returncode == 3, (command, done)
        assert f"channel '{channel}' does not exist" in done.stderr, done.stderr
        assert "OK" not in done.stdout
    assert not await asyncio.to_thread(_topic_exists, stack, channel)


async def test_a_channel_named_like_a_partition_is_refused_at_once(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str], unique: str
) -> None:
    node = NodeProcess(tmp_path, 1, _settings(stack, etcd_prefix("partition")))
    await node.start()
    try:
        async with NodeClient(node.address) as client:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.assign(f"p-{unique}-partition-0", timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
        assert "-partition-" in (refused.value.details() or "")
    finally:
        assert await node.terminate() == 0
    assert not await asyncio.to_thread(_topic_exists, stack, f"p-{unique}-partition-0")
