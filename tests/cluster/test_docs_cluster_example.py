"""``docs/cluster-example.md`` runs as written: its three node files, the commands
that start the nodes, read the status, write, move, drain, stop and clean up.

The page's blocks are taken from its source by their ``cluster-example`` markers. Only
the values the page calls yours to choose are changed (:func:`choices`), so that a run
meets neither another run nor a real cluster on the page's ports; each must be found in
the page, so a page that changes them fails here instead of running unchanged. The
files name no endpoint: the suite's environment (``tests/conftest.py``) points the
defaults at the local stack, as ``streamwal stack env`` does for a reader's shell.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamwal import defaults
from streamwal.cluster.store import ClusterStore
from streamwal.environment import ETCD_ENDPOINTS, PULSAR_ADMIN_URL, PULSAR_SERVICE_URL
from streamwal.node.config import load_config
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.process import die_with_parent
from tests.node.processes import free_port, run_python
from tests.node.processes import shown as shown_of

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cluster-example.md"

_BLOCK = re.compile(r"<!-- cluster-example: (\S+) -->\n```\w*\n(.*?)```", re.S)
#: the page's blocks, in the order a reader meets them
STEPS = (
    "node-1.yaml",
    "node-2.yaml",
    "node-3.yaml",
    "start",
    "status",
    "write.py",
    "write",
    "move",
    "drain",
    "undrain",
    "delete",
)
#: the values the page marks as yours to choose
PORTS = ("7001", "7002", "7003", "9464", "9465", "9466")
PREFIX = "/example"
CHANNEL_STEM = "orders-"
#: what ``streamwal`` and ``python`` in the page's commands are, after ``python``
PROGRAMS = {"streamwal": ["-m", "streamwal.cli"], "python": []}


def page_blocks() -> dict[str, str]:
    """The page's marked blocks by marker, verbatim."""
    blocks = dict(_BLOCK.findall(PAGE.read_text()))
    assert set(blocks) == set(STEPS), sorted(blocks)
    return blocks


def choices(prefix: str, unique: str) -> dict[str, str]:
    """Each value the page leaves to the reader, and this run's: free ports, a fresh
    key prefix, channel names of its own."""
    chosen = {f":{port}": f":{free_port()}" for port in PORTS}
    return {**chosen, PREFIX: prefix, CHANNEL_STEM: f"cx-{unique}-"}


def substituted(blocks: dict[str, str], chosen: dict[str, str]) -> dict[str, str]:
    """``blocks`` with ``chosen`` put in; every value chosen must occur in the page."""
    text = "\n".join(blocks.values())
    assert all(value in text for value in chosen), [v for v in chosen if v not in text]
    out = {}
    for name, block in blocks.items():
        for value, replacement in chosen.items():
            block = block.replace(value, replacement)
        out[name] = block
    return out


def commands(block: str) -> list[list[str]]:
    """A shell block's commands as arguments to ``python``."""
    lines = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    out = []
    for line in lines:
        program, *args = shlex.split(line)
        out.append([*PROGRAMS[program], *args])
    return out


@dataclass
class Status:
    """What ``cluster status`` prints that the steps check: each node's channel count
    and flags, each channel's owner and state, the channels a move placed."""

    nodes: dict[int, tuple[int, str]]
    channels: dict[str, tuple[str, str]]
    pinned: set[str]

    def settled(self, node_ids: set[int], channels: list[str]) -> bool:
        return set(self.nodes) == node_ids and all(
            self.channels.get(c, ("", ""))[1] == "serving" for c in channels
        )


def parse_status(text: str, channels: list[str]) -> Status:
    nodes = {
        int(m[1]): (int(m[2]), m[3].strip())
        for m in re.finditer(r"^ +(\d+) +\S+ +v\S+ .*?channels (\d+)(.*)$", text, re.M)
    }
    owned = {}
    pinned = set()
    for channel in channels:
        m = re.search(rf"^  {re.escape(channel)} +node (\S+)\s+(\w+)(.*)$", text, re.M)
        if m:
            owned[channel] = (m[1], m[2])
            if "placed by cluster move" in m[3]:
                pinned.add(channel)
    return Status(nodes, owned, pinned)


def test_the_page_has_every_step_and_the_files_make_one_cluster() -> None:
    blocks = page_blocks()
    for step in ("start", "status", "write", "move", "drain", "undrain", "delete"):
        assert commands(blocks[step]), step
    compile(blocks["write.py"], "write.py", "exec")
    assert commands(blocks["start"]) == [
        ["-m", "streamwal.cli", "serve", "--config", f"node-{n}.yaml"] for n in (1, 2, 3)
    ]


def test_the_files_take_their_endpoints_from_the_defaults_or_the_environment(
    tmp_path: Path,
) -> None:
    """The page's claim that the same files work on a stock broker and etcd and on the
    lab's stack: the files name no endpoint, and the loader fills the sections they
    leave out from the variables, else from the standard local endpoints."""
    stack = {
        PULSAR_SERVICE_URL: "pulsar://127.0.0.1:16650",
        PULSAR_ADMIN_URL: "http://127.0.0.1:18080",
        ETCD_ENDPOINTS: "127.0.0.1:12379",
    }
    configs = []
    for n in (1, 2, 3):
        path = tmp_path / f"node-{n}.yaml"
        path.write_text(page_blocks()[f"node-{n}.yaml"])
        assert "pulsar" not in path.read_text() and "etcd" not in path.read_text()
        stock = load_config(path, environ={})
        assert stock.pulsar.service_url == defaults.PULSAR_SERVICE_URL
        assert list(stock.etcd.endpoints) == [defaults.ETCD_ENDPOINT]
        config = load_config(path, environ=stack)
        assert config.pulsar.service_url == stack[PULSAR_SERVICE_URL]
        assert list(config.etcd.endpoints) == [stack[ETCD_ENDPOINTS]]
        configs.append(config)
    assert [c.node.id for c in configs] == [1, 2, 3]
    # one cluster: the same oracle and cluster settings in every file
    assert all((c.tso, c.cluster) == (configs[0].tso, configs[0].cluster) for c in configs)
    assert configs[0].tso.mode == "in-process" and configs[0].cluster.enabled
    assert configs[0].tso.key_prefix == configs[0].cluster.key_prefix == PREFIX
    assert len({c.node.listen for c in configs}) == 3
    assert len({c.node.metrics_listen for c in configs}) == 3


class Node:
    """One of the page's ``streamwal serve`` commands, run as written in ``workdir``."""

    def __init__(self, workdir: Path, args: list[str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [*die_with_parent(), sys.executable, *args],
                cwd=workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    async def ready(self, timeout: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while b"ready on" not in self.log.read_bytes():
            text = self.log.read_text(errors="replace")[-3000:]
            assert self.proc.poll() is None, f"{self.proc.args!r} exited:\n{text}"
            assert asyncio.get_running_loop().time() < deadline, f"not ready:\n{text}"
            await asyncio.sleep(0.1)

    async def stop(self) -> int:
        """Ctrl-C, as the page says, and the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return await asyncio.wait_for(asyncio.to_thread(self.proc.wait), 30)


@pytest.fixture
async def nodes() -> AsyncIterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()


@pytest.mark.integration
async def test_the_three_node_example_runs_as_written(
    stack: StackInfo,
    tmp_path: Path,
    etcd_prefix: Callable[[str], str],
    unique: str,
    nodes: list[Node],
) -> None:
    prefix = etcd_prefix("cx")
    blocks = substituted(page_blocks(), choices(prefix, unique))
    channels = [f"cx-{unique}-{i}" for i in range(3)]

    async def run(step: str) -> str:
        (args,) = commands(blocks[step])
        code, out, err = await run_python(*args, timeout=90, cwd=tmp_path)
        assert code == 0, f"{step}: {args}\n{shown_of(out, err)}"
        return out

    async def status_until(what: str, check: Callable[[Status], bool]) -> Status:
        deadline = asyncio.get_running_loop().time() + 45
        while True:
            status = parse_status(await run("status"), channels)
            if check(status):
                return status
            assert asyncio.get_running_loop().time() < deadline, f"{what}: {status}"
            await asyncio.sleep(0.5)

    # 1. the files
    for n in (1, 2, 3):
        (tmp_path / f"node-{n}.yaml").write_text(blocks[f"node-{n}.yaml"])
    (tmp_path / "write.py").write_text(blocks["write.py"])
    # 2. the nodes, each as its own command
    for i, args in enumerate(commands(blocks["start"]), start=1):
        nodes.append(Node(tmp_path, args, tmp_path / f"node-{i}.log"))
    for node in nodes:
        await node.ready(60)
    # 3. three nodes, one channel each, every channel serving
    await status_until(
        "three nodes, one channel each, all serving",
        lambda s: s.settled({1, 2, 3}, channels) and all(c == 1 for c, _ in s.nodes.values()),
    )
    # 4. every write acknowledged
    out = await run("write")
    acked = [line.split()[0] for line in out.splitlines() if " acknowledged at " in line]
    assert acked == channels, out
    # 5. the move lands: the first channel serving on node 3, placed there by the move
    out = await run("move")
    assert f"channel {channels[0]}" in out and "node 3" in out, out
    status = await status_until(
        "the moved channel serving on node 3",
        lambda s: s.settled({1, 2, 3}, channels) and s.channels[channels[0]][0] == "3",
    )
    assert channels[0] in status.pinned, status
    # 6. the drain empties node 2 and every channel serves elsewhere
    out = await run("drain")
    assert "node 2 drained" in out, out
    drained = parse_status(out, channels)  # the status the drain printed when it ended
    assert drained.nodes[2][0] == 0 and "draining" in drained.nodes[2][1], out
    # (a rebalancing step of another channel may still be opening as the drain ends)
    status = await status_until(
        "every channel serving off node 2",
        lambda s: s.settled({1, 2, 3}, channels) and s.nodes[2][0] == 0,
    )
    assert all(owner in ("1", "3") for owner, _ in status.channels.values()), status
    assert "node 2 undrained" in await run("undrain")
    # 7. each node stops cleanly; then the cluster's keys and topics go
    for node in reversed(nodes):
        assert await node.stop() == 0, node.log.read_text(errors="replace")[-3000:]
    out = await run("delete")
    assert re.search(rf"deleted \d+ keys under {re.escape(prefix)}/cluster/", out), out
    for channel in channels:
        assert f"/{channel} deleted" in out, out
    # what stays under the prefix is the oracle's, as the page's table says
    async with ClusterStore([stack.etcd_endpoint]) as store:
        _revision, left = await store.read_prefix(prefix + "/")
    keys = {entry.key for entry in left}
    assert f"{prefix}/tso/timestamp" in keys, keys
    assert all(key.startswith(f"{prefix}/tso/") for key in keys), keys
