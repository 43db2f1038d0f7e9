"""The cluster profile's parts that need no cluster: its admin entry, its folder, and
the CLI's answer to a profile it does not know."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys

import pytest

from streamwal_lab.stack import Stack, StackPaths
from streamwal_lab.stack.cluster import cluster_services
from streamwal_lab.stack.entry import serve
from streamwal_lab.stack.stack import StackError
from tests.node.processes import free_port


async def _answer_with(port_name: bytes) -> asyncio.Server:
    async def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(port_name)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


async def _ask(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def test_the_admin_entry_hands_each_connection_to_the_next_broker() -> None:
    one, two = await _answer_with(b"one"), await _answer_with(b"two")
    ports = [s.sockets[0].getsockname()[1] for s in (one, two)]
    down = free_port()  # a broker that is not running
    listen = free_port()
    entry = asyncio.create_task(serve(listen, [*ports, down]))
    try:
        for _ in range(50):
            with contextlib.suppress(OSError):
                await _ask(listen)
                break
            await asyncio.sleep(0.05)
        answers = [await _ask(listen) for _ in range(6)]
        # the probe above took one turn; a broker that is down answers nothing
        assert sorted(answers) == sorted([b"one", b"two", b""] * 2)
        assert answers[:3] in ([b"two", b"", b"one"], [b"", b"one", b"two"], [b"one", b"two", b""])
        assert answers[:3] == answers[3:]
    finally:
        entry.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await entry
        for server in (one, two):
            server.close()


def test_the_cluster_profile_keeps_its_data_apart(tmp_path: object) -> None:
    paths = StackPaths.default("lab", profile="cluster")
    assert paths.stack.name == "lab-cluster"
    assert StackPaths.default("lab").stack.name == "lab"
    names = [s.name for s in cluster_services(paths)]
    assert names == [
        "zookeeper",
        "bookie-1",
        "bookie-2",
        "bookie-3",
        "broker-1",
        "broker-2",
        "admin-entry",
    ]
    with pytest.raises(StackError, match="unknown profile 'clutser'"):
        Stack(paths, profile="clutser")
    with pytest.raises(StackError, match="cluster profile"):
        Stack(paths, profile="cluster").info()


def test_a_mistyped_profile_is_refused_and_starts_nothing(tmp_path: object) -> None:
    env = {**os.environ, "STREAMWAL_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "streamwal.cli", "stack", "up", "--profile", "clutser"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "invalid choice: 'clutser'" in done.stderr
    assert not any(os.scandir(str(tmp_path)))  # no stack folder, no download
