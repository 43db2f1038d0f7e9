"""In-process TSO nodes listening on every interface advertise ``node.advertise_address``.

The leader's etcd record is what the other candidates dial after a not-leader
answer; a wildcard there would send each of them to itself.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable
from pathlib import Path

import etcd3
import pytest
import yaml

from streamwal.node.client import NodeClient
from streamwal.tso.store import LeaderRecord
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import verify_channel
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, free_port

pytestmark = pytest.mark.integration


def _wildcard_node(tmp_path: Path, node_id: int, settings: dict[str, object]) -> NodeProcess:
    """Without TLS and auth a node on every interface must say so: ``auth.insecure``."""
    port = free_port()
    node = {
        "listen": f"0.0.0.0:{port}",
        "advertise_address": f"127.0.0.1:{port}",
        "metrics_listen": f"127.0.0.1:{free_port()}",
    }
    auth = {"insecure": True}
    return NodeProcess(tmp_path, node_id, {**settings, "node": node, "auth": auth}, port=port)


def _readyz(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/readyz", timeout=5) as answer:
        return str(answer.read().decode())


async def test_leader_record_holds_the_advertised_address(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    prefix = etcd_prefix("adv")
    common = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "tso": {"mode": "in-process", "key_prefix": prefix},
    }
    host, _, port = stack.etcd_endpoint.rpartition(":")
    etcd = etcd3.client(host, int(port), timeout=5)
    leader = _wildcard_node(tmp_path, 1, common)
    follower = _wildcard_node(tmp_path, 2, common)
    channel = f"adv-{unique}"
    try:
        await leader.start()
        # serving insecurely on purpose is said at start and on every readiness probe
        assert "serves insecure: node.listen" in leader.log_text()
        metrics = yaml.safe_load(leader.config_path.read_text())["node"]["metrics_listen"]
        body = await asyncio.to_thread(_readyz, metrics)
        assert body.startswith("ready\n") and "auth: insecure:" in body, body
        raw, _ = await asyncio.to_thread(etcd.get, f"{prefix}/tso/leader")
        assert raw is not None
        assert LeaderRecord.decode(raw).address == leader.address
        assert leader.address == f"127.0.0.1:{leader.port}"

        # a second candidate stands by and takes its timestamps from the leader,
        # whose address it learns from its own service's not-leader answer
        await follower.start()
        assert f"TSO: {leader.address} leads" in follower.log_text()
        acks: list[Ack] = []
        async with NodeClient(follower.address) as client:
            await client.assign(channel)
            for seq in range(5):
                payload = f"{channel}/{seq}".encode()
                a = await client.produce(channel, payload)
                acks.append(Ack(a.message_id, a.time_tick, digest(payload)))
        raw, _ = await asyncio.to_thread(etcd.get, f"{prefix}/tso/leader")
        assert raw is not None
        assert LeaderRecord.decode(raw).address == leader.address  # no leader change
    finally:
        codes = [await node.terminate() for node in (follower, leader)]
        etcd.close()
    assert codes == [0, 0], "a node did not stop cleanly"
    acks_file = tmp_path / "acks.jsonl"
    acks_file.write_text("".join(a.to_json() + "\n" for a in acks))
    report = await verify_channel(stack.pulsar_url, channel, acks_file)
    assert report.ok, report.summary()
    assert report.acks_checked == 5
