"""``streamwal verify`` on a 300,000-message channel of the real broker: it passes,
reads every message, and its peak RSS stays under the bound that does not depend on
the channel's length."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal_lab.bench.verify import MAX_RSS_MB, run_verify, write_wal_log
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration

MESSAGES = 300_000


@pytest.mark.timeout(240)
async def test_verify_reads_300k_messages_in_bounded_memory(stack: StackInfo) -> None:
    channel = f"verify-scale-{uuid.uuid4().hex[:8]}"
    topic = PulsarConfig(service_url=stack.pulsar_url).topic(channel)
    try:
        entries = await asyncio.to_thread(write_wal_log, stack.pulsar_url, topic, MESSAGES)
        run = await asyncio.to_thread(
            run_verify, stack.pulsar_url, channel, "--admin", stack.pulsar_admin_url
        )
    finally:
        await PulsarAdmin(stack.pulsar_admin_url).delete(
            f"{PulsarAdmin.topic_path(topic)}?force=true"
        )
    assert run.code == 0, run.stderr[-2000:]
    report = run.report
    assert report["ok"] and report["messages"] == entries == MESSAGES + 1
    assert report["decoded"] == entries and report["owners_count"] == 1
    assert report["work_bytes"] > 0
    assert run.max_rss_mb <= MAX_RSS_MB, f"peak RSS {run.max_rss_mb:.0f} MB"
