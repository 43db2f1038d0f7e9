"""Failover between oracles on a real etcd; the leader runs as its own process and dies."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streamwal.errors import NotLeaderError
from streamwal.tso.allocator import LocalAllocator
from streamwal.tso.config import EtcdConfig, TsoConfig
from streamwal.tso.oracle import TimestampOracle
from streamwal.tso.remote import RemoteSource
from streamwal.tso.service import TsoServer
from streamwal_lab.stack.process import die_with_parent

pytestmark = pytest.mark.integration

_ROOT = Path(__file__).resolve().parents[2]
_LEASE_TTL_S = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_follower_takes_over_within_a_lease_and_above_the_old_leader(
    etcd_endpoint: str, tso_prefix: str, tmp_path: Path
) -> None:
    leader_address = f"127.0.0.1:{_free_port()}"
    log = (tmp_path / "leader.log").open("wb")
    leader = await asyncio.create_subprocess_exec(
        *[
            *die_with_parent(),
            sys.executable,
            "-m",
            "streamwal.cli",
            "tso",
            "serve",
            "--etcd",
            etcd_endpoint,
            "--prefix",
            tso_prefix,
            "--listen",
            leader_address,
            "--lease-ttl",
            str(_LEASE_TTL_S),
        ],
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    config = TsoConfig(
        etcd=EtcdConfig((etcd_endpoint,)), key_prefix=tso_prefix, lease_ttl_s=_LEASE_TTL_S
    )
    follower: TimestampOracle | None = None
    server: TsoServer | None = None
    try:
        async with RemoteSource([leader_address], timeout_s=30.0) as probe:
            await probe.fetch(1)  # the leader process is up and serving
        server = TsoServer(None, "127.0.0.1:0")
        await server.start()
        follower = TimestampOracle(config, address=server.address)
        server.attach(follower)
        await follower.start()

        with pytest.raises(NotLeaderError) as info:
            await follower.wait_serving(3.0, fail_if_follower=True)
        assert info.value.leader == leader_address

        # Listed follower first: the allocator must follow the not-leader answer.
        allocator = LocalAllocator(
            RemoteSource([server.address, leader_address], timeout_s=15.0),
            batch_size=100,
            close_source=True,
        )
        async with allocator:
            before = [await allocator.allocate() for _ in range(1_000)]

            leader.send_signal(signal.SIGKILL)
            await leader.wait()
            loop = asyncio.get_running_loop()
            killed_at = loop.time()
            await follower.wait_serving(_LEASE_TTL_S + 5.0)
            takeover_s = loop.time() - killed_at
            # About one lease: etcd expires the dead leader's key, then the next campaign.
            assert takeover_s < _LEASE_TTL_S + 1.5

            first_new = await follower.generate()
            assert first_new > max(before)
            await allocator.sync()
            after = [await allocator.allocate() for _ in range(300)]
        assert min(after) > max(before)
        assert after == sorted(set(after))
    finally:
        if leader.returncode is None:
            leader.kill()
            await leader.wait()
        if server is not None:
            await server.close()
        if follower is not None:
            await follower.close()
        log.close()
