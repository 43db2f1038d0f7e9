"""The in-process bookie really follows the disk settings the stack writes for it.

The session's private stock broker (random ports, its own data folder, removed at the
end; ``stock`` in ``tests/conftest.py``) is prepared by the same
``PulsarService.prepare()`` as the shared stack, which gives every broker, stock or
not, the same bookie settings (:data:`BOOKIE_DISK`). 200 MiB written to one topic, held
by a subscription, must add journals and entry logs, none bigger than its configured
size; deleting the topic must give the entry logs' space back within a few garbage
collections. Other tests of the session wrote a little to that broker before, so what
is counted is what this write added. With BookKeeper's defaults the same write leaves
one journal of 200 MiB and entry logs of 64 MiB (a flush of the bookie's memtable
each), and deleting the topic frees nothing for minutes.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from pathlib import Path

import pytest
from pulsar import asyncio as pulsar_asyncio

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal_lab.chaos.services import PrivatePulsar
from streamwal_lab.stack.pulsar import BOOKIE_DISK
from streamwal_lab.stack.stack import disk_usage

pytestmark = pytest.mark.integration

MIB = 1 << 20
WRITTEN_MIB = 200


def _files(bookie: Path, suffix: str) -> dict[str, int]:
    """Lengths of the bookie's journals (``.txn``) or entry logs (``.log``)."""
    return {f.name: f.stat().st_size for f in (bookie / "current").glob(f"*{suffix}")}


async def test_journals_and_entry_logs_stay_small_and_deleted_ledgers_leave_the_disk(
    stock: PrivatePulsar,
) -> None:
    broker = stock
    bookie = broker.workdir / "data" / "bookkeeper"
    admin = PulsarAdmin(broker.admin_url)
    namespace = f"bookie-disk-{uuid.uuid4().hex[:8]}"
    await admin.put(f"namespaces/public/{namespace}")
    # a stock broker deletes a topic nobody subscribes to once inactive: the
    # subscription holds the entries until the test deletes the topic
    topic = f"persistent://public/{namespace}/bookie-disk"
    journals_before = _files(bookie, ".txn")
    entry_logs_before = _files(bookie, ".log")
    client = pulsar_asyncio.Client(broker.url)
    try:
        consumer = await client.subscribe(topic, "hold")
        await consumer.close()
        producer = await client.create_producer(topic, batching_enabled=False)
        payload = os.urandom(MIB - 1024)
        for _ in range(WRITTEN_MIB):
            await producer.send(payload)
        await producer.close()
    finally:
        await client.close()

    journals = _files(bookie, ".txn")
    # a journal rolls over past its maximum, grown by at most one preallocation step
    journal_max = (BOOKIE_DISK["journalMaxSizeMB"] + BOOKIE_DISK["journalPreAllocSizeMB"]) * MIB
    assert set(journals) - set(journals_before), f"the journal never rolled over: {journals}"
    assert max(journals.values()) <= journal_max, journals
    # the entries reached the disk in several entry logs; one rolls over once past its
    # limit, between two flushes of the memtable
    entry_logs = _files(bookie, ".log")
    entry_log_max = BOOKIE_DISK["logSizeLimit"] + BOOKIE_DISK["skipListSizeLimit"]
    grown = [n for n, size in entry_logs.items() if size > entry_logs_before.get(n, 0) + MIB]
    assert len(grown) >= 2, (entry_logs_before, entry_logs)
    assert max(entry_logs.values()) <= entry_log_max, entry_logs

    before = disk_usage(bookie)
    await admin.delete(f"{PulsarAdmin.topic_path(topic)}?force=true")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 3 * BOOKIE_DISK["gcWaitTime"] / 1000 + 30
    freed = 0
    while freed < WRITTEN_MIB // 2 * MIB:
        assert loop.time() < deadline, (
            f"{freed // MIB} MiB freed after the topic was deleted: {_files(bookie, '.log')}"
        )
        await asyncio.sleep(0.5)
        freed = before - disk_usage(bookie)

    # the broker's INFO lines go to its size-rolled file; its output keeps only warnings
    output = (broker.workdir / "pulsar.log").read_text(errors="replace")
    assert " - INFO  - " not in output
    # the bookie's settings are logged at the start, perhaps rolled over since then
    logs = sorted(broker.workdir.glob("broker.log*"))
    log = "".join(path.read_text(errors="replace") for path in logs)
    for kind in ("Minor", "Major"):
        interval = re.search(rf"{kind} Compaction : enabled=true, .*interval=(\d+)", log)
        assert interval is not None, f"no {kind} compaction in the bookie's log"
        assert int(interval[1]) == BOOKIE_DISK[f"{kind.lower()}CompactionInterval"] * 1000
