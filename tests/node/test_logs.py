"""Quiet, attributable logs: a library user's fences say nothing on stderr; a node's
Pulsar client log is a file of its own, named in its start line, every line with the
node's id; ``node.log_format: json`` makes every line on stderr an object.

Real broker, real etcd, real ``streamwal serve`` processes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamwal.node.logs import NodeJsonFormatter
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.process import die_with_parent
from tests.node.processes import NodeProcess, free_port, run_python, serve_once, shown

pytestmark = pytest.mark.integration

#: what the C++ client says about a fence (streamwal's own warning says
#: "fenced by a newer owner (Result.ProducerFenced)" and is not one of these)
_CLIENT_FENCE_LINES = ("ResultProducerFenced", "Failed to close producer", "ProducerBusy")

#: a library user: no logging configured; B takes A's channel over, A's next append
#: is refused, both close; then a client that cannot reach any broker at all
_LIBRARY_USER = """
import asyncio, sys
from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.adaptors.testing import writable
from streamwal.errors import ChannelFencedError, StreamwalError
from streamwal.wal.backend import append_entry

async def main(url, channel, dead_url):
    config = PulsarConfig(service_url=url)
    async with PulsarOpener(config) as first, PulsarOpener(config) as second:
        a = await writable(first, channel)
        for i in range(20):
            await append_entry(a, b"a-%d" % i, {})
        b = await writable(second, channel)
        try:
            await append_entry(a, b"late", {})
        except ChannelFencedError:
            print("fenced", flush=True)
        await a.close()
        await b.close()
    dead = PulsarConfig(service_url=dead_url, operation_timeout_s=1.0)
    async with PulsarOpener(dead) as opener:
        try:
            await writable(opener, channel + "-dead")
        except StreamwalError:
            print("unreachable", flush=True)

asyncio.run(main(*sys.argv[1:4]))
"""


async def test_a_library_users_fence_prints_no_client_line_on_stderr(
    stack: StackInfo, unique: str
) -> None:
    dead_url = f"pulsar://127.0.0.1:{free_port()}"
    code, out, err = await run_python(
        "-c", _LIBRARY_USER, stack.pulsar_url, f"log-fence-{unique}", dead_url, timeout=120
    )
    assert code == 0, shown(out, err)
    assert "fenced" in out.split() and "unreachable" in out.split(), shown(out, err)
    noisy = [line for line in err.splitlines() if any(m in line for m in _CLIENT_FENCE_LINES)]
    assert not noisy, shown(out, err)
    # what is not a fence still reaches WARNING: the client's connection errors
    dead_port = dead_url.rpartition(":")[2]
    assert any(
        f":{dead_port}" in line and "Connection refused" in line for line in err.splitlines()
    ), shown(out, err)


def _settings(stack: StackInfo, prefix: str, **node: Any) -> dict[str, Any]:
    return {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "tso": {"key_prefix": prefix},
        "node": node,
    }


def _client_log_of(start_output: str) -> Path:
    match = re.search(r"listening on \S+; .*\(Pulsar client log: (.+)\)$", start_output, re.M)
    assert match is not None, start_output[-3000:]
    return Path(match.group(1))


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def _lines_when(path: Path, condition: Callable[[list[str]], bool]) -> list[str]:
    """The file's lines once ``condition`` holds (the relay writes as lines come)."""
    lines: list[str] = []
    for _ in range(100):
        lines = _lines(path)
        if condition(lines):
            break
        await asyncio.sleep(0.1)
    return lines


def _from_client(line: str) -> bool:
    return "ClientConnection:" in line or "ProducerImpl:" in line


async def test_each_node_writes_its_own_client_log_named_in_its_start_line(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    log_dir = tmp_path / "logs"
    nodes = [
        NodeProcess(tmp_path, node_id, _settings(stack, etcd_prefix("logs"), log_dir=str(log_dir)))
        for node_id in (5, 6)
    ]
    try:
        for node in nodes:
            await node.start()
        paths = [_client_log_of(node.log_text()) for node in nodes]
        assert paths[0] != paths[1]
        for node, path in zip(nodes, paths, strict=True):
            assert path.parent == log_dir and str(node.node_id) in path.name, path
            # the broker checks before ready fence a probe producer: the client warns
            lines = await _lines_when(path, lambda ls: any(_from_client(x) for x in ls))
            assert any(_from_client(line) for line in lines), lines
            assert lines and all(f"node={node.node_id} " in line for line in lines), lines
            # the node's own log lines (timestamped) carry its id too
            own = [x for x in node.log_text().splitlines() if re.match(r"\d{4}-\d\d-\d\d ", x)]
            assert own and all(f"node={node.node_id} " in line for line in own), own
    finally:
        codes = [await node.terminate() for node in nodes]
    assert codes == [0, 0], [node.log_text()[-2000:] for node in nodes]


async def test_json_format_makes_every_stderr_line_an_object_with_the_node_id(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    log_dir = tmp_path / "logs"
    node = NodeProcess(
        tmp_path,
        7,
        _settings(stack, etcd_prefix("json-logs"), log_format="json", log_dir=str(log_dir)),
    )
    out_path, err_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        serve = ["-m", "streamwal.cli", "serve", "--config", str(node.config_path)]
        proc = subprocess.Popen(
            [*die_with_parent(), sys.executable, *serve],
            stdout=out,
            stderr=err,
            env=os.environ.copy(),
        )
    try:
        for _ in range(600):
            if b"ready on" in out_path.read_bytes() or proc.poll() is not None:
                break
            await asyncio.sleep(0.1)
        assert b"ready on" in out_path.read_bytes(), shown(
            out_path.read_text(), err_path.read_text()
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(asyncio.to_thread(proc.wait), 30)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    assert code == 0, shown(stdout, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, shown(stdout, stderr)
    for line in lines:
        entry = json.loads(line)  # a line that is not JSON fails here, shown
        assert entry["node"] == 7, line
        assert {"time", "level", "logger", "message"} <= set(entry), line
    assert any(e["message"].startswith("node 7 stopped") for e in map(json.loads, lines))
    # the client log is in the node's format too
    client_lines = await _lines_when(_client_log_of(stdout), lambda ls: len(ls) > 1)
    entries = [json.loads(line) for line in client_lines]
    assert entries and all(e["node"] == 7 for e in entries), client_lines
    assert any(_from_client(e["message"]) for e in entries), client_lines


def test_json_lines_carry_the_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, "", 0, "failed\non two lines", None, None)
        record.exc_info = sys.exc_info()
    line = NodeJsonFormatter(3).format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["node"] == 3 and entry["level"] == "ERROR"
    assert entry["message"] == "failed\non two lines"
    assert "ValueError: boom" in entry["exception"]


@pytest.mark.parametrize("where", ["file", "environment"])
def test_a_bad_log_format_stops_the_start_with_a_clear_message(tmp_path: Path, where: str) -> None:
    config: dict[str, Any] = {"node": {"metrics_listen": ""}}
    env = os.environ.copy()
    if where == "file":
        config["node"]["log_format"] = "xml"
    else:
        env["STREAMWAL_NODE__LOG_FORMAT"] = "xml"
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(config))
    done = serve_once(path, env)
    assert done.returncode != 0, done
    assert "node.log_format: expected one of text, json, got 'xml'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
