"""Node processes for fault scenarios: ``streamwal serve`` children that can be killed.

Each node keeps its loopback port and its log across a kill and a restart, so clients
and peers find it again where they knew it. Nothing here outlives :meth:`close`, nor
(on Linux) the process that started it: a child is killed when its parent dies.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from streamwal_lab.stack.process import child_pids, die_with_parent

__all__ = ["SERVE", "NodeProcess", "die_with_parent", "free_port"]


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


#: the argv of a plain node, to which ``--config <file>`` is added
SERVE: tuple[str, ...] = (sys.executable, "-m", "streamwal.cli", "serve")


class NodeProcess:
    """One ``streamwal serve`` child; ``address`` is its gRPC endpoint.

    ``settings`` is the node's configuration (sections as in ``node.yaml``);
    ``command`` the argv that runs it, to which ``--config <file>`` is added (another
    entry, e.g. :func:`~streamwal_lab.chaos.clock_node.clock_node_command`, for a node
    built differently).
    """

    def __init__(
        self,
        workdir: Path,
        node_id: int,
        settings: Mapping[str, Any],
        *,
        command: Sequence[str] = SERVE,
    ) -> None:
        self.node_id = node_id
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        base: dict[str, Any] = {
            "node": {"id": node_id, "listen": self.address, "metrics_listen": ""}
        }
        self.config = _merge(base, settings)
        self.config["node"]["listen"] = self.address
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / f"node-{node_id}.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config))
        self.log_path = workdir / f"node-{node_id}.log"
        self.command = list(command)
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    async def start(self, timeout: float = 60.0, *, until: bytes = b"ready on") -> None:
        """Start the node and wait until it serves (``until`` in its log: ``b"listening
        on"`` for a node not expected to be ready); raises with the log's tail if it fails."""
        if self.running:
            return
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._proc = self._spawn()
        self.starts += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while until not in self._log_bytes(offset):
            if self._proc.poll() is not None:
                raise RuntimeError(f"node {self.node_id} exited:\n{self.log_text()[-3000:]}")
            if loop.time() > deadline:
                await self.kill()
                raise TimeoutError(f"node {self.node_id} not ready:\n{self.log_text()[-3000:]}")
            await asyncio.sleep(0.05)

    def _spawn(self) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as log:
            serve = [*self.command, "--config", str(self.config_path)]
            return subprocess.Popen(
                [*die_with_parent(), *serve], stdout=log, stderr=subprocess.STDOUT
            )

    def _log_bytes(self, offset: int) -> bytes:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (graceful stop), SIGKILL if it does not exit within ``timeout``."""
        try:
            return await self._signal(signal.SIGTERM, timeout)
        except TimeoutError:
            return await self.kill()

    async def kill(self) -> int | None:
        """SIGKILL: the node dies at once, with appends in flight."""
        return await self._signal(signal.SIGKILL, 10.0)

    def kill_child(self, name: str) -> bool:
        """SIGKILL the node's live child process called ``name`` (its native front),
        leaving the node itself running; ``False`` if it has no such child."""
        if not self.running:
            return False
        assert self._proc is not None
        for pid in child_pids(self._proc.pid):
            try:
                # the kernel keeps a process's first 15 characters as its name
                if Path(f"/proc/{pid}/comm").read_text().strip() == name[:15]:
                    os.kill(pid, signal.SIGKILL)
                    return True
            except (FileNotFoundError, ProcessLookupError):  # ended meanwhile
                continue
        return False

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and its lease runs on, as in a long GC
        pause or a stalled disk; :meth:`resume` lets it go on."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)

    async def _signal(self, sig: int, timeout: float) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(sig)
        return await asyncio.wait_for(asyncio.to_thread(proc.wait), timeout)

    async def close(self) -> None:
        """Make sure the process is gone (graceful first); idempotent."""
        if self.running:
            await self.terminate(10.0)
