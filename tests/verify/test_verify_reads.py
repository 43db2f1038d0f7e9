"""Where ``streamwal verify`` starts, on the real broker: ``--since`` seeks by publish
time, ``--from`` starts at an id, and a ``--state`` checkpoint continues after the last
id the run before read."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId
from streamwal.verify.cli import iter_topic, verify_channel
from streamwal_lab.bench.verify import write_wal_log
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration


async def test_since_from_and_a_checkpoint_start_where_they_say(
    stack: StackInfo, channel: str, tmp_path: Path
) -> None:
    url, admin = stack.pulsar_url, stack.pulsar_admin_url
    topic = PulsarConfig(service_url=url).topic(channel)
    first = await asyncio.to_thread(write_wal_log, url, topic, 300)
    state = tmp_path / "chk.state"
    whole = await verify_channel(url, channel, admin_url=admin, state=state)
    assert whole.ok and whole.messages == first, whole.summary()
    await asyncio.sleep(1.0)
    between = int(time.time() * 1000)
    await asyncio.sleep(1.0)
    second = await asyncio.to_thread(write_wal_log, url, topic, 200)  # a second ownership

    since = await verify_channel(url, channel, admin_url=admin, since_ms=between)
    assert since.ok and since.messages == second, since.summary()
    assert since.owners_count == 1

    ids = [e.message_id for e in await asyncio.to_thread(lambda: list(iter_topic(url, topic)))]
    assert len(ids) == first + second, [str(i) for i in ids[-3:]]
    start = ids[first + 50]
    assert isinstance(start, PulsarMessageId)
    from_id = await verify_channel(url, channel, admin_url=admin, start=start)
    assert from_id.ok and from_id.messages == second - 50 and from_id.started_at == str(start)

    resumed = await verify_channel(url, channel, admin_url=admin, state=state)
    assert resumed.ok and resumed.messages == second, resumed.summary()
    assert resumed.resumed_after == str(ids[first - 1])
    assert resumed.owners == [(1, str(ids[first]))]
    # nothing after the start: nothing read, and no wait for an entry that never comes
    began = time.monotonic()
    again = await verify_channel(url, channel, admin_url=admin, state=state)
    assert again.ok and again.messages == 0 and again.resumed_after == str(ids[-1])
    later = await verify_channel(url, channel, admin_url=admin, since_ms=int(time.time() * 1000))
    assert later.ok and later.messages == 0
    last = ids[-1]
    assert isinstance(last, PulsarMessageId)
    end = await verify_channel(url, channel, admin_url=admin, start=last)
    assert end.messages == 1
    assert time.monotonic() - began < 20
