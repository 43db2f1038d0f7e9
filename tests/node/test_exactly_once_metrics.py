"""The exactly-once families on /metrics: duplicates answered, transactions in flight
and ended by outcome."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal.node.client import NodeClient
from streamwal_lab.stack import StackInfo
from tests.node.processes import metrics_node
from tests.node.test_metrics import scrape, value

pytestmark = pytest.mark.integration


async def test_duplicates_and_transactions_are_counted(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    node, port = metrics_node(
        tmp_path, stack.pulsar_url, stack.etcd_endpoint, etcd_prefix("eos-metrics")
    )
    await node.start()
    channel = f"eos-metrics-{unique}"
    try:
        async with NodeClient(node.address, tracing=False) as client:
            await client.assign(channel)
            first = await client.produce(channel, b"once")
            for _ in range(3):
                await client.produce(channel, b"once", sequence=first.sequence)
            committed = await client.begin_txn(channel, "v")
            await client.produce(channel, b"t", vchannel="v", txn_id=committed)
            await client.commit_txn(channel, committed)
            await client.rollback_txn(channel, await client.begin_txn(channel, "v"))
            await client.begin_txn(channel, "v")  # left open
            samples = scrape(port)
    finally:
        await node.terminate()
    assert value(samples, "streamwal_wal_idempotence_duplicates_total", channel=channel) == 3
    ended = "streamwal_wal_txn_ended_total"
    assert value(samples, ended, channel=channel, outcome="committed") == 1
    assert value(samples, ended, channel=channel, outcome="rolled_back") == 1
    assert value(samples, "streamwal_wal_txn_in_flight", channel=channel) == 1
