"""``streamwal demo --part cluster`` passes on the shared stack and shows the failover."""

from __future__ import annotations

import asyncio
import os
import re

import pytest

from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.topics import list_topics
from tests.node.processes import run_python
from tests.node.processes import shown as shown_of

pytestmark = pytest.mark.integration


async def test_the_cluster_demo_kills_an_owner_and_shows_the_failover(
    telemetry_stack: StackInfo,
) -> None:
    code, text, err = await run_python(
        "-m", "streamwal.cli", "demo", "--part", "cluster", timeout=240
    )
    shown = shown_of(text, err)
    assert code == 0, shown
    assert "WARNING" not in text and "!!" not in text, shown
    moved = re.search(
        r"moved to node \d \(node-lost, term \d+\); first acknowledged append "
        r"([\d.]+) s after the kill \(bound 7 s\)",
        text,
    )
    assert moved and float(moved.group(1)) <= 7.0, shown
    assert re.search(r"failover trace: \S*[0-9a-f]{32}", text), shown
    assert "cluster.move" in text and "`- wal.open" in text, shown
    # one trace from the dead owner's last renewal to the first write, by deployed names
    assert "cluster.failover  [streamwal-node]" in text, shown
    assert "`- cluster.first_write" in text, shown
    assert "streamwal-cluster-demo" not in text, shown
    # the writers' produces that waited across it, linked to it, as the client's own
    waited = re.search(r"(\d+) produce\(s\) waited across it, each linked to its move", text)
    assert waited and int(waited.group(1)) >= 1, shown
    outage = re.search(
        r"outage as the cluster saw it \(last renewal to first write\): ([\d.]+) s", text
    )
    assert outage and float(outage.group(1)) >= 0.8 * float(moved.group(1)), shown
    assert text.count(", 0 violations") == 4, shown
    # after a success its channels and its nodes' logs go
    channels = set(re.findall(r"\bdemo-cluster-\d{8}-\d\b", text))
    assert len(channels) == 4, shown
    left = {t.rsplit("/", 1)[-1] for t in await list_topics(telemetry_stack.pulsar_admin_url)}
    assert not channels & left, channels & left
    workdir = re.search(r"logs in (\S+)\)", text)
    assert workdir and not await asyncio.to_thread(os.path.exists, workdir.group(1)), shown
