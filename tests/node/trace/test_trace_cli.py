"""``streamwal trace show`` and ``trace opens`` against the stack's real Jaeger.

One node process of this module, exporting through the stack's collector under a
service name of its own, opens three channels: one quickly, one while a fault proxy
keeps the broker unreachable for a few seconds (so its first time tick takes several
attempts), and one quickly again. The commands run as a user runs them, as processes.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from streamwal.node.client import NodeClient
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.trace.query import find_traces
from streamwal_lab.faultproxy import FaultProxy
from streamwal_lab.stack import StackInfo
from tests.etcd_keys import EtcdPrefixes
from tests.node.processes import NodeProcess, free_port

#: the node's operation timeout: long enough that an open through a passing proxy on a
#: loaded machine succeeds at its first attempt, short enough that several fail meanwhile
_OPERATION_TIMEOUT_S = 2
_UNREACHABLE_S = 5.0  # longer than the operation timeout: attempts fail


@dataclass(frozen=True)
class Opens:
    jaeger_url: str
    service: str
    slow_channel: str
    slow: pb.AssignChannelResponse
    fast_channels: tuple[str, str]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamwal.cli", "trace", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def _run(*args: str) -> str:
    done = await asyncio.to_thread(_cli, *args)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
async def opens(
    telemetry_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Opens]:
    info = telemetry_stack
    assert info.otlp_endpoint and info.jaeger_url
    run = uuid.uuid4().hex[:10]
    service = f"streamwal-trace-cli-{run}"
    channels = (f"fast-a-{run}", f"slow-{run}", f"fast-b-{run}")
    prefixes = EtcdPrefixes(info.etcd_endpoint)
    try:
        async with FaultProxy(int(info.pulsar_url.rsplit(":", 1)[1])) as proxy:
            node = NodeProcess(
                tmp_path_factory.mktemp("trace-cli"),
                1,
                {
                    "pulsar": {
                        "service_url": f"pulsar://{proxy.url_host}",
                        "operation_timeout_s": _OPERATION_TIMEOUT_S,
                    },
                    "etcd": {"endpoints": [info.etcd_endpoint]},
                    "tso": {"key_prefix": prefixes.new("trace-cli")},
                    "telemetry": {"service_name": service, "otlp_endpoint": info.otlp_endpoint},
                },
            )
            await node.start()
            try:
                async with NodeClient(node.address) as client:
                    await client.assign(channels[0])
                    proxy.set_mode("refuse")
                    slow_open = asyncio.create_task(client.assign(channels[1]))
                    await asyncio.sleep(_UNREACHABLE_S)
                    assert not slow_open.done()
                    proxy.set_mode("pass")
                    slow = await asyncio.wait_for(slow_open, 60)
                    await client.assign(channels[2])
            finally:
                assert await node.terminate() == 0  # flushes the exporter
    finally:
        await prefixes.delete_all()
    assert slow.attempts >= 2
    # every open and every attempt span is in Jaeger before a command asks for it
    await find_traces(info.jaeger_url, service, operation="wal.open", min_spans=3, timeout=60)
    await find_traces(
        info.jaeger_url,
        service,
        operation="wal.first_time_tick.attempt",
        min_spans=slow.attempts + 2,
        timeout=60,
    )
    yield Opens(info.jaeger_url, service, channels[1], slow, (channels[0], channels[2]))


@pytest.mark.integration
async def test_show_lists_every_attempt_in_order_with_its_error_and_backoff(opens: Opens) -> None:
    slow = opens.slow
    text = await _run("show", slow.trace_id, "--jaeger", opens.jaeger_url)
    lines = text.splitlines()
    assert lines[0].startswith(f"trace {slow.trace_id}: "), text
    (open_line,) = [line for line in lines if " wal.open  [" in line]
    assert f"channel={opens.slow_channel}" in open_line and f"attempts={slow.attempts}" in open_line
    assert f"[{opens.service}]" in open_line
    rows = [i for i, line in enumerate(lines) if "wal.first_time_tick.attempt  [" in line]
    assert len(rows) == slow.attempts, text
    numbers = [int(re.search(r" attempt=(\d+)", lines[i]).group(1)) for i in rows]  # type: ignore[union-attr]
    assert numbers == list(range(1, slow.attempts + 1)), text
    backoffs = [float(re.search(r" backoff_ms=([\d.]+)", lines[i]).group(1)) for i in rows]  # type: ignore[union-attr]
    assert backoffs[0] == 0 and backoffs == sorted(backoffs) and backoffs[-1] > 0, text
    for i in rows[:-1]:  # every failed attempt: ERROR, node 1, and its exception below it
        assert re.search(r" ERROR +1  \|", lines[i]), lines[i]
        error = lines[i + 1]
        assert error.strip().startswith("! ") and len(error.strip()) > 4, text
        assert error.index("!") == lines[i].index("wal.first_time_tick.attempt"), text
    last = lines[rows[-1]]
    assert " ERROR " not in last
    assert f"time_tick={slow.first_time_tick}" in last, last
    assert f"message_id={slow.first_message_id_text}" in last, last
    assert rows[-1] == len(lines) - 1 or "! " not in lines[rows[-1] + 1]

    data = json.loads(await _run("show", slow.trace_id, "--json", "--jaeger", opens.jaeger_url))
    attempts = [s for s in data["spans"] if s["operation"] == "wal.first_time_tick.attempt"]
    assert [s["attributes"]["attempt"] for s in attempts] == numbers
    assert [s["status"] for s in attempts] == ["error"] * (slow.attempts - 1) + ["unset"]
    assert all(s["errors"] for s in attempts[:-1]) and not attempts[-1]["errors"]
    assert {s["node"] for s in attempts} == {"1"}
    assert attempts[-1]["attributes"]["time_tick"] == slow.first_time_tick
    offsets = [s["start_offset_ms"] for s in attempts]
    assert offsets == sorted(offsets)


@pytest.mark.integration
async def test_opens_ranks_the_slow_open_first(opens: Opens) -> None:
    slow = opens.slow
    found: list[dict[str, Any]] = json.loads(
        await _run("opens", "--service", opens.service, "--since", "10m", "--json",
                   "--jaeger", opens.jaeger_url)
    )  # fmt: skip
    assert found and found[0]["channel"] == opens.slow_channel, found
    assert {o["channel"] for o in found[1:]} == set(opens.fast_channels), found
    durations = [o["duration_ms"] for o in found]
    assert durations == sorted(durations, reverse=True)
    first = found[0]
    assert first["trace_id"] == slow.trace_id and first["node"] == "1"
    assert first["attempts"] == slow.attempts
    assert first["failed_attempts"] == slow.attempts - 1 == len(first["errors"])
    assert first["duration_ms"] >= _UNREACHABLE_S * 1000 * 0.9
    assert all(o["attempts"] == 1 and o["errors"] == [] for o in found[1:])

    text = await _run("opens", "--service", opens.service, "--since", "10m",
                      "--jaeger", opens.jaeger_url)  # fmt: skip
    lines = text.splitlines()
    assert lines[0].split() == [
        "duration", "attempts", "failed", "status", "node", "channel", "started", "(UTC)", "trace"
    ]  # fmt: skip
    assert opens.slow_channel in lines[1] and slow.trace_id in lines[1]
    assert lines[1].split()[2:4] == [str(slow.attempts), str(slow.attempts - 1)]
    assert lines[2].lstrip().startswith("! "), text

    # across every service Jaeger holds, --channel finds just this one open
    only = json.loads(
        await _run("opens", "--channel", opens.slow_channel, "--since", "10m", "--json",
                   "--jaeger", opens.jaeger_url)
    )  # fmt: skip
    assert [(o["channel"], o["trace_id"]) for o in only] == [(opens.slow_channel, slow.trace_id)]


@pytest.mark.integration
async def test_show_of_a_trace_jaeger_does_not_hold(telemetry_stack: StackInfo) -> None:
    assert telemetry_stack.jaeger_url
    done = await asyncio.to_thread(
        _cli, "show", uuid.uuid4().hex, "--jaeger", telemetry_stack.jaeger_url
    )
    assert done.returncode == 3 and done.stdout == ""  # docs/cli.md: it does not exist
    assert done.stderr.startswith("error: ") and "holds no trace" in done.stderr


async def test_a_jaeger_that_does_not_answer_is_named() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for args in (("show", "ab" * 16), ("opens",)):
        done = await asyncio.to_thread(_cli, *args, "--jaeger", url)
        assert done.returncode == 1, done
        assert f"Jaeger's query API at {url} does not answer" in done.stderr
        assert "streamwal stack up" in done.stderr


def test_a_bad_trace_id_is_refused() -> None:
    done = _cli("show", "not-a-trace", "--jaeger", "http://127.0.0.1:1")
    assert done.returncode == 2 and "not a trace id" in done.stderr  # a wrong argument
