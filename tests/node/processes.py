"""Node processes for end-to-end tests: ``streamwal serve`` with a generated config."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.process import die_with_parent, port_in_use

__all__ = [
    "NodeProcess",
    "free_port",
    "plain_node",
    "run_streamwal",
    "running",
    "serve_once",
    "stack_environ",
    "streamwal_cli",
]


_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_once(config_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``streamwal serve --config config_path`` run to its end (a config it refuses)."""
    return subprocess.run(
        [sys.executable, "-m", "streamwal.cli", "serve", "--config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=_ROOT,
        check=False,
    )


class NodeProcess:
    """One ``streamwal serve`` child; ``address`` is its gRPC endpoint.

    ``port`` lets a test that writes its own ``node.listen`` (a wildcard, say) know
    the port before the settings are built; by default a free one is picked.
    """

    def __init__(
        self, workdir: Path, node_id: int, settings: dict[str, Any], *, port: int | None = None
    ) -> None:
        self.node_id = node_id
        self.port = free_port() if port is None else port
        self.address = f"127.0.0.1:{self.port}"
        base_node = {"id": node_id, "listen": self.address, "metrics_listen": ""}
        config = {**settings, "node": {**base_node, **settings.get("node", {})}}
        #: the node's settings as written to its file (sections as in ``node.yaml``)
        self.config: dict[str, Any] = config
        self.config_path = workdir / f"node-{node_id}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / f"node-{node_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        #: where the child runs (``python -m`` puts it first on ``sys.path``: a checkout
        #: of another commit here runs that commit's code); None: this one's
        self.cwd: Path | None = None

    async def start(
        self,
        env: dict[str, str] | None = None,
        timeout: float = 60.0,
        *,
        until: bytes = b"ready on",
    ) -> None:
        """Start ``streamwal serve`` and wait for ``until`` in its log: by default its
        ready line; ``b"listening on"`` for a node that is not expected to be ready."""
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [
                    *die_with_parent(),
                    sys.executable,
                    "-m",
                    "streamwal.cli",
                    "serve",
                    "--config",
                    str(self.config_path),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=self.cwd,
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while until not in self.log_path.read_bytes():
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.node_id} exited:\n{self.log_text()[-3000:]}")
            if loop.time() > deadline:
                raise TimeoutError(f"node {self.node_id} not ready:\n{self.log_text()[-3000:]}")
            await asyncio.sleep(0.1)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def terminate(self, timeout: float = 30.0) -> int:
        return await self._signal(signal.SIGTERM, timeout)

    async def stop(self, sig: int, timeout: float = 30.0) -> int:
        """Send ``sig`` (SIGTERM or SIGINT: both stop gracefully) and wait for the exit."""
        return await self._signal(sig, timeout)

    async def kill(self) -> int:
        return await self._signal(signal.SIGKILL, 10.0)

    async def _signal(self, sig: int, timeout: float) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout)
        return code

    def __del__(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()


def metrics_node(
    workdir: Path, pulsar_url: str, etcd_endpoint: str, key_prefix: str
) -> tuple[NodeProcess, int]:
    """A node of its own (in-process TSO under ``key_prefix``) that serves ``/metrics``;
    the node, not started, and its metrics port."""
    port = free_port()
    node = NodeProcess(
        workdir,
        1,
        {
            "pulsar": {"service_url": pulsar_url},
            "etcd": {"endpoints": [etcd_endpoint]},
            "node": {"metrics_listen": f"127.0.0.1:{port}"},
            "tso": {"key_prefix": key_prefix},
        },
    )
    return node, port


def wait_port_closed(port: int) -> bool:
    return not port_in_use(port)


async def run_python(*args: str, timeout: float, cwd: Path | None = None) -> tuple[int, str, str]:
    """``python ARGS`` in a child process (in ``cwd``, if given), killed if it outlives
    ``timeout``: its exit code, its output and its error output (decoded). A test that
    fails shows the tail of both through :func:`shown`."""
    proc = await asyncio.create_subprocess_exec(
        *die_with_parent(),
        sys.executable,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=os.environ.copy(),
        cwd=cwd,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def shown(out: str, err: str, out_chars: int = 4000, err_chars: int = 2000) -> str:
    """The tails of a child's output and error output, for an assertion message."""
    return f"stdout:\n{out[-out_chars:]}\nstderr:\n{err[-err_chars:]}"


def run_streamwal(
    *args: str,
    stdin: str | int | None = None,
    cwd: Path = _ROOT,
    timeout: float = 90.0,
) -> subprocess.CompletedProcess[str]:
    """``streamwal ARGS`` in a child process run to its end: its exit code and output,
    decoded. ``stdin``: text its input, a file descriptor (a terminal, say) read as it
    is; none: no input at all, so a command that would ask never waits."""
    return subprocess.run(
        [sys.executable, "-m", "streamwal.cli", *args],
        input=stdin if isinstance(stdin, str) else None,
        stdin=subprocess.DEVNULL if stdin is None else None if isinstance(stdin, str) else stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )


async def streamwal_cli(
    *args: str, stdin: str | None = None, timeout: float = 90.0
) -> subprocess.CompletedProcess[str]:
    """:func:`run_streamwal` off the event loop."""
    return await asyncio.to_thread(run_streamwal, *args, stdin=stdin, timeout=timeout)


def stack_environ(stack: StackInfo, node_id: int, key_prefix: str) -> dict[str, str]:
    """The settings (``STREAMWAL_*`` variables, for ``load_config``) of node ``node_id``
    run inside the test's process on the stack's broker and etcd: any free port, no
    metrics listener, an in-process TSO under ``key_prefix``."""
    return {
        "STREAMWAL_NODE__ID": str(node_id),
        "STREAMWAL_NODE__LISTEN": "127.0.0.1:0",
        "STREAMWAL_NODE__METRICS_LISTEN": "",
        "STREAMWAL_PULSAR__SERVICE_URL": stack.pulsar_url,
        "STREAMWAL_ETCD__ENDPOINTS": stack.etcd_endpoint,
        "STREAMWAL_TSO__MODE": "in-process",
        "STREAMWAL_TSO__KEY_PREFIX": key_prefix,
    }


def plain_node(workdir: Path, stack: StackInfo, key_prefix: str) -> NodeProcess:
    """Node 1 on the stack's broker and etcd, with an in-process TSO under
    ``key_prefix`` and no cluster: not started."""
    return NodeProcess(
        workdir,
        1,
        {
            "pulsar": {"service_url": stack.pulsar_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"mode": "in-process", "key_prefix": key_prefix},
        },
    )


@contextlib.asynccontextmanager
async def running(node: NodeProcess) -> AsyncIterator[NodeProcess]:
    """``node`` started, and stopped (SIGTERM) on exit however the block ends."""
    try:
        await node.start()
        yield node
    finally:
        await node.terminate()
