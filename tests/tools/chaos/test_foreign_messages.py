"""Foreign messages in a channel's topic: written by another producer before the first
owner and between two owners (while an owner holds the topic the broker refuses such
a producer). Scanners skip and count them (``Scanner.skipped`` and the
``streamwal.wal.scanner.skipped`` metric of the node), the checker lists them."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest
from pulsar import asyncio as pulsar_asyncio
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.node.client import NodeClient, policy
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import verify_channel
from streamwal.wal import open_read_only
from streamwal_lab.chaos.nodes import free_port
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration

_FOREIGN = [
    (b"plain text from another application", {}),
    (b"looks like ours", {"_t": "Insert", "_v": "1", "_tt": "12", "_src": "x"}),
    (b"\x00\xff binary", {"key": "value"}),
]


async def _write_foreign(service_url: str, topic: str, tag: str) -> list[str]:
    client = pulsar_asyncio.Client(service_url, operation_timeout_seconds=10)
    try:
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = []
        for payload, props in _FOREIGN:
            sent = await producer.send(payload + tag.encode(), properties=props)
            ids.append(str(PulsarMessageId.from_pulsar(sent)))
        await producer.close()
        return ids
    finally:
        await client.close()


def _skipped_metric(port: int, channel: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("streamwal_wal_scanner_skipped") and f'channel="{channel}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_foreign_messages_are_skipped_counted_and_listed(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    channel = f"foreign-{unique}"
    topic = PulsarConfig(service_url=stack.pulsar_url).topic(channel)
    metrics_port = free_port()
    node = NodeProcess(
        tmp_path,
        1,
        {
            "node": {"metrics_listen": f"127.0.0.1:{metrics_port}"},
            "pulsar": {"service_url": stack.pulsar_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"mode": "in-process", "key_prefix": etcd_prefix("foreign")},
        },
    )
    await node.start()
    acks: list[Ack] = []
    foreign_ids = await _write_foreign(stack.pulsar_url, topic, "/before")
    try:
        async with NodeClient(node.address) as client:
            for stint in range(2):
                await client.assign(channel)
                for i in range(5):
                    payload = f"{channel}/{stint}/{i}".encode()
                    a = await client.produce(channel, payload)
                    acks.append(Ack(a.message_id, a.time_tick, digest(payload)))
                if stint == 0:
                    # while the owner holds the topic, the broker refuses another producer
                    raw = pulsar_asyncio.Client(stack.pulsar_url, operation_timeout_seconds=10)
                    try:
                        with pytest.raises(PulsarException) as refused:
                            await raw.create_producer(topic)
                        assert refused.value.error() in (
                            pulsar.Result.ProducerBusy,
                            pulsar.Result.ProducerFenced,
                        )
                    finally:
                        await raw.close()
                    await client.remove(channel)  # between two owners, it gets in
                    foreign_ids += await _write_foreign(stack.pulsar_url, topic, "/between")
            # a reader through the node sees only streamwal's messages
            await client.assign(channel)  # an owner again, so the node can serve reads
            seen = []
            async for m in client.consume(channel, policy("all")):
                seen.append(m)
                if m.message_id == acks[-1].message_id:
                    break
            assert not any(m.payload.startswith((b"plain", b"looks", b"\x00")) for m in seen)
            data = [m.payload for m in seen if m.type != "TimeTick"]
            assert data == [f"{channel}/{s}/{i}".encode() for s in range(2) for i in range(5)]
            assert _skipped_metric(metrics_port, channel) == len(foreign_ids) == 6
    finally:
        await node.terminate()
    # a scanner of this process skips and counts them too
    async with PulsarOpener(PulsarConfig(service_url=stack.pulsar_url)) as opener:
        wal = await open_read_only(opener, channel)
        scanner = await wal.read()
        delivered = 0
        async for msg in scanner:
            delivered += 1
            if msg.message_id.to_bytes() == acks[-1].message_id:
                break
        assert scanner.skipped == 6
        assert delivered >= 10
        await wal.close()
    # the checker lists them, and finds the log sound
    report = await verify_channel(stack.pulsar_url, channel, acks=acks)
    assert report.ok, report.summary()
    assert report.foreign == foreign_ids
    assert report.acks_checked == 10
    assert re.search(r"foreign or undecodable \(6\)", report.summary())
