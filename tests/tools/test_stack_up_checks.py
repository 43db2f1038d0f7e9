"""``stack up`` refuses to start when a port is taken or Java/Maven is missing.

Both checks run before anything is installed or started, so each test also looks
for a process of the private stack it used and finds none. The shared stack is only
read: its ports are probed, never bound, and it is never stopped.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamwal_lab.stack import Stack, StackInfo, StackPaths
from streamwal_lab.stack.pulsar import PULSAR_VERSION, PulsarService
from streamwal_lab.stack.stack import StackError
from tests.node.processes import free_port


def _quiet(_: str) -> None:
    return None


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamwal.cli", "stack", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (a private stack's folder, say)."""
    found = []
    needle = text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def _listening(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.fixture
def private_paths() -> Iterator[StackPaths]:
    """A stack folder of this test in the shared cache (so the installed jars are found)."""
    paths = StackPaths.default(f"up-checks-{uuid.uuid4().hex[:10]}")
    yield paths
    shutil.rmtree(paths.stack, ignore_errors=True)


def _fake_tool(folder: Path, name: str, stderr: str = "") -> None:
    """An executable ``name`` in ``folder`` that prints ``stderr`` (``java -version`` does)."""
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text(f"#!/bin/sh\necho '{stderr}' >&2\n")
    tool.chmod(0o755)


def _only_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> Path:
    """A ``PATH`` of one folder holding a ``java`` of ``version``; that folder."""
    tools = tmp_path / "bin"
    _fake_tool(tools, "java", f'openjdk version "{version}" 2024-01-16')
    monkeypatch.setenv("PATH", str(tools))
    return tools


def _installed_cache(root: Path) -> Path:
    """A cache in which the Pulsar jars count as fetched, so Maven is not needed any more."""
    lib = root / "artifacts" / f"pulsar-{PULSAR_VERSION}" / "lib"
    lib.mkdir(parents=True)
    (lib / ".complete").write_text("0 jars\n")
    return root


# ---- port taken -------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("label", ["broker", "web"])
async def test_up_fails_fast_naming_the_taken_port(
    stack: StackInfo, private_paths: StackPaths, label: str
) -> None:
    ports = {"broker": free_port(), "web": free_port()}
    private = Stack(private_paths, progress=_quiet)
    private.services = {
        "pulsar": PulsarService(private_paths, broker_port=ports["broker"], web_port=ports["web"])
    }
    started = time.monotonic()
    with _listening(ports[label]), pytest.raises(StackError) as caught:
        await private.up(["pulsar"])
    elapsed = time.monotonic() - started

    message = str(caught.value)
    assert f"pulsar: port {ports[label]} ({label})" in message
    assert "already taken" in message
    assert elapsed < 20, f"the port check took {elapsed:.1f}s: it should fail before starting"
    assert not (private_paths.stack / "state.json").exists()
    assert [row for row in private.status() if row["running"]] == []
    assert _processes_mentioning(str(private_paths.stack)) == []


@pytest.mark.integration
async def test_cli_up_of_a_second_stack_names_the_port_the_shared_one_holds(
    stack: StackInfo, private_paths: StackPaths
) -> None:
    """A second stack on the default ports: exit 1, the port and service named, nothing run."""
    etcd_port = int(stack.etcd_endpoint.rsplit(":", 1)[1])
    env = {**os.environ, "STREAMWAL_STACK": private_paths.stack.name}
    try:
        done = await asyncio.to_thread(_cli, "up", "--only", "etcd", env=env)
        assert done.returncode == 1, done.stderr
        assert f"error: etcd: port {etcd_port} (client)" in done.stderr
        assert "already taken" in done.stderr
        assert not (private_paths.stack / "state.json").exists()
        assert _processes_mentioning(str(private_paths.stack)) == []
    finally:  # had the check let it through, stop what the private stack started
        await Stack(private_paths, progress=_quiet).down()


# ---- missing prerequisites ------------------------------------------------------------


def _pulsar(cache: Path) -> PulsarService:
    return PulsarService(StackPaths(cache=cache, stack=cache / "stacks" / "test"))


def test_without_java_or_maven_both_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    problems = _pulsar(tmp_path / "cache").prerequisites()
    assert len(problems) == 2, problems
    java, maven = problems
    assert "Java 17 or newer" in java and "'java' not found" in java
    assert "Maven ('mvn')" in maven


def test_an_old_java_is_named_with_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _only_java(tmp_path, monkeypatch, "11.0.22")
    problems = _pulsar(_installed_cache(tmp_path / "cache")).prerequisites()
    assert len(problems) == 1, problems
    assert "Java 17 or newer" in problems[0] and "found 11" in problems[0]


def test_maven_is_needed_only_until_the_jars_are_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = _only_java(tmp_path, monkeypatch, "21.0.2")
    fresh = _pulsar(tmp_path / "fresh").prerequisites()
    assert len(fresh) == 1 and "Maven ('mvn')" in fresh[0], fresh
    assert _pulsar(_installed_cache(tmp_path / "installed")).prerequisites() == []
    _fake_tool(tools, "mvn")
    assert _pulsar(tmp_path / "fresh").prerequisites() == []


async def test_cli_up_without_java_or_maven_exits_naming_both(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    cache = tmp_path / "cache"
    env = {
        **{k: v for k, v in os.environ.items() if k != "JAVA_HOME"},
        "PATH": str(empty),
        "STREAMWAL_CACHE_DIR": str(cache),
        "STREAMWAL_STACK": "no-prerequisites",
    }
    done = await asyncio.to_thread(_cli, "up", "--only", "pulsar", env=env)
    assert done.returncode == 1, done.stderr
    assert "error: missing prerequisites" in done.stderr
    assert "Java 17 or newer is required" in done.stderr
    assert "Maven ('mvn') is required" in done.stderr
    assert not (cache / "stacks" / "no-prerequisites" / "state.json").exists()
    assert _processes_mentioning(str(cache)) == []
