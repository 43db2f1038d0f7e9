"""A streaming node in a child process (``streamwal serve``), for suites measured through gRPC.

A child process rather than a :class:`~streamwal.server.runtime.Node` in the bench's own event
loop: a client reaches a real node over a socket from another process, and the node's
event loop and GIL must not be the ones the bench's callers run on, or the figures
would mix the client's CPU with the node's. The node is configured from the
environment only, so nothing the caller's shell sets for another node
(``STREAMWAL_*__*``, ``OTEL_*``) leaks in: it runs on the bench's broker and etcd, with
an in-process TSO under its own key prefix. Its telemetry is on as a deployed node's
is: metrics recorded and served (on a port the OS picks), and traces exported over OTLP
to the target's collector when it has one (the local stack's does), so the figures
include what tracing and metrics cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from streamwal.node.client import NodeClient
from streamwal_lab.bench.target import CLIENT_LOG, BenchTarget
from streamwal_lab.stack.process import die_with_parent
from streamwal_lab.stack.tso_keys import deleted_afterwards

__all__ = ["BenchNode", "BenchNodeError", "node_and_client", "node_log"]

_READY = re.compile(rb"ready on (\S+)")
_METRICS = re.compile(rb"ready on \S+ \(metrics on (\S+)\)")
_STOP_TIMEOUT_S = 30.0


class BenchNodeError(RuntimeError):
    """The node did not start (its log's tail is in the message)."""


def _environment(target: BenchTarget, node_id: int, key_prefix: str) -> dict[str, str]:
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("STREAMWAL_") and "__" in k) and not k.startswith("OTEL_")
    }
    return {
        **inherited,
        "STREAMWAL_NODE__ID": str(node_id),
        "STREAMWAL_NODE__LISTEN": "127.0.0.1:0",
        "STREAMWAL_NODE__METRICS_LISTEN": "127.0.0.1:0",
        "STREAMWAL_PULSAR__SERVICE_URL": target.pulsar_url,
        "STREAMWAL_PULSAR__CLIENT_LOG_FILE": CLIENT_LOG,
        "STREAMWAL_ETCD__ENDPOINTS": target.etcd_endpoint,
        "STREAMWAL_TSO__MODE": "in-process",
        "STREAMWAL_TSO__KEY_PREFIX": key_prefix,
        "STREAMWAL_TELEMETRY__OTLP_ENDPOINT": target.otlp_endpoint or "",
        "STREAMWAL_TELEMETRY__LOG_LEVEL": "WARNING",
    }


class BenchNode:
    """``async with BenchNode(target, key_prefix=..., log_path=...) as node``; ``node.address``.

    The node listens on a port the OS picks and says which in its "ready on" line.
    Leaving the block stops it with SIGTERM (a graceful stop), SIGKILL if it hangs. Its
    output file goes with a node that stopped cleanly (exit code 0, the block left
    without an error) unless ``keep_log``: a bench leaves nothing behind it but what
    explains a failure.
    """

    def __init__(
        self,
        target: BenchTarget,
        *,
        key_prefix: str,
        log_path: Path,
        node_id: int = 1,
        ready_timeout_s: float = 60.0,
        extra_env: Mapping[str, str] | None = None,
        keep_log: bool = False,
        config_file: Path | None = None,
    ) -> None:
        """``config_file``: a node file for what variables cannot say (``auth:``'s
        identities); the variables above still win over it."""
        self._env = {**_environment(target, node_id, key_prefix), **(extra_env or {})}
        self._config_args = [] if config_file is None else ["--config", str(config_file)]
        self.log_path = log_path
        self._keep_log = keep_log
        self._ready_timeout_s = ready_timeout_s
        self._proc: asyncio.subprocess.Process | None = None
        self.address = ""
        self.metrics_url = ""
        """Where the node serves its metrics (Prometheus text), once it is ready."""
        self.exit_code: int | None = None

    async def __aenter__(self) -> BenchNode:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_bytes(b"")
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self._proc = await asyncio.create_subprocess_exec(
                *die_with_parent(),
                sys.executable,
                "-m",
                "streamwal.cli",
                "serve",
                *self._config_args,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=self._env,
            )
        try:
            self.address = await self._wait_ready()
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(self, _type: object, exc: object, _tb: object) -> None:
        await self._stop()
        if exc is None and self.exit_code == 0 and not self._keep_log:
            self.log_path.unlink(missing_ok=True)

    @property
    def pid(self) -> int:
        """The node's process id, once started (its CPU time is read from it)."""
        if self._proc is None:
            raise RuntimeError("the node is not started")
        return self._proc.pid

    def log_tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.strip().splitlines()[-lines:])

    async def _wait_ready(self) -> str:
        assert self._proc is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._ready_timeout_s
        while (found := _READY.search(self.log_path.read_bytes())) is None:
            if self._proc.returncode is not None:
                raise BenchNodeError(
                    f"the node exited with {self._proc.returncode}:\n{self.log_tail()}"
                )
            if loop.time() > deadline:
                raise BenchNodeError(
                    f"the node was not ready in {self._ready_timeout_s:g} s:\n{self.log_tail()}"
                )
            await asyncio.sleep(0.1)
        metrics = _METRICS.search(self.log_path.read_bytes())
        self.metrics_url = metrics.group(1).decode() if metrics else ""
        return found.group(1).decode()

    async def kill(self) -> None:
        """SIGKILL, as a crash would end it (failover suites)."""
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            self.exit_code = await self._proc.wait()

    async def stop(self) -> None:
        """SIGTERM and wait (SIGKILL if it hangs), as leaving the block does."""
        await self._stop()

    async def _stop(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            self.exit_code = None if proc is None else proc.returncode
            return
        proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = await asyncio.wait_for(proc.wait(), _STOP_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            self.exit_code = await proc.wait()
        except BaseException:  # cancelled while waiting: no node may outlive the bench
            proc.kill()
            # reap it even though this task is being cancelled: an unawaited child
            # stays a zombie and its transport warns when it is collected
            await asyncio.shield(proc.wait())
            raise


def node_log(name: str) -> Path:
    """Where a bench node's output goes: beside the bench's Pulsar client log."""
    return Path(CLIENT_LOG).parent / name


@contextlib.asynccontextmanager
async def node_and_client(
    target: BenchTarget,
    *,
    key_prefix: str,
    log_name: str,
    node_id: int = 1,
    extra_env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
    tracing: bool = True,
    token: str | None = None,
) -> AsyncIterator[tuple[BenchNode, NodeClient]]:
    """A node child (:class:`BenchNode`, output in :func:`node_log` ``(log_name)``) and a
    client of it; on the way out the client closes, the node stops and its etcd keys
    under ``key_prefix`` go, in that order, whichever step failed."""
    node = BenchNode(
        target,
        key_prefix=key_prefix,
        log_path=node_log(log_name),
        node_id=node_id,
        extra_env=extra_env,
        config_file=config_file,
    )
    async with (
        deleted_afterwards(target.etcd_endpoint, [key_prefix]),
        node,
        NodeClient(node.address, tracing=tracing, token=token) as client,
    ):
        yield node, client
