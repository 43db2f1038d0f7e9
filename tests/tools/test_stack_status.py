"""``stack status`` names each running service, its ports and a pid that really serves them.

Only reads the shared stack. The pid is checked against the kernel: it must be alive
and hold a listening socket on every port ``status`` reports for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from streamwal_lab.stack import StackInfo

SERVICES = ("etcd", "pulsar", "jaeger", "otel-collector")


def _status(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streamwal.cli", "stack", "status", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _live(pid: int) -> bool:
    """A process, and not a zombie: ``kill(pid, 0)`` succeeds and /proc shows its state."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return False
    return state != "Z"


def _listening_ports(pid: int) -> set[int]:
    """Loopback TCP ports on which ``pid`` holds a listening socket (per /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.integration
async def test_status_shows_each_service_running_with_ports_and_a_live_pid(
    telemetry_stack: StackInfo,
) -> None:
    rows = {row["service"]: row for row in json.loads(await asyncio.to_thread(_status, "--json"))}
    assert set(SERVICES) <= set(rows), rows
    for name in SERVICES:
        row = rows[name]
        assert row["running"] is True, row
        pid = row["pid"]
        assert isinstance(pid, int) and pid > 0, row
        assert _live(pid), f"{name}: pid {pid} is not a live process"
        ports = set(row["ports"].values())
        assert ports, row
        missing = ports - _listening_ports(pid)
        assert not missing, f"{name} (pid {pid}) does not listen on {sorted(missing)}"

    assert rows["pulsar"]["ports"]["broker"] == int(telemetry_stack.pulsar_url.rsplit(":", 1)[1])
    assert rows["pulsar"]["url"] == telemetry_stack.pulsar_url
    assert rows["etcd"]["ports"]["client"] == int(telemetry_stack.etcd_endpoint.rsplit(":", 1)[1])

    text = await asyncio.to_thread(_status)
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    for name in SERVICES:
        row = rows[name]
        assert f"running pid {row['pid']}" in lines[name], lines[name]
        for label, port in row["ports"].items():
            assert f"{label}={port}" in lines[name], lines[name]


async def test_status_of_a_stack_never_started_shows_every_service_stopped() -> None:
    env = {**os.environ, "STREAMWAL_STACK": f"never-started-{uuid.uuid4().hex[:10]}"}
    rows = json.loads(await asyncio.to_thread(_status, "--json", env=env))
    assert {row["service"] for row in rows} >= set(SERVICES)
    assert all(row["running"] is False and row["pid"] is None for row in rows), rows
    text = await asyncio.to_thread(_status, env=env)
    assert all(" stopped " in line for line in text.splitlines() if line.strip()), text


def _page(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


@pytest.mark.integration
async def test_status_says_whether_jaegers_ui_is_real(telemetry_stack: StackInfo) -> None:
    """``ui_real`` is what the running Jaeger serves at ``/``, read here on its own."""
    assert telemetry_stack.jaeger_url
    page = await asyncio.to_thread(_page, f"{telemetry_stack.jaeger_url}/")
    real = b"This is a placeholder for the Jaeger UI" not in page
    rows = {row["service"]: row for row in json.loads(await asyncio.to_thread(_status, "--json"))}
    assert rows["jaeger"]["ui_real"] is real, rows["jaeger"]
    assert rows["jaeger"]["ui_source"], rows["jaeger"]
    assert "ui_real" not in rows["pulsar"]
    (line,) = [
        x for x in (await asyncio.to_thread(_status)).splitlines() if x.startswith("jaeger ")
    ]
    assert f"ui_real={'yes' if real else 'no'}" in line, line
