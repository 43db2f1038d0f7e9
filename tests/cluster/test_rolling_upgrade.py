"""A rolling upgrade, one node at a time while clients write, from a commit that
writes the first log format to this checkout.

The old nodes run the pinned commit's own code: its tree is taken from this
repository's history (``git archive``) and each old node runs in it, so ``python -m``
finds that commit's ``streamwal`` (and its lab) first. The new nodes write the old
format for as long as an old node is registered (it could not read the new one) and
the new format once every node reads it; the history checker reads both and finds
every acknowledged append once.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import signal
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.cluster import ClusterClient
from streamwal.verify.cli import verify_channel
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message.codec import entry_format
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster, Writer

pytestmark = pytest.mark.integration

#: the last commit whose nodes write only the first log format (and know no other)
UPGRADE_FROM = "928250949129ff86012906dd341747a1310d5d54"

_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def old_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned commit's tree, from this repository's history."""
    if shutil.which("git") is None:
        pytest.fail("the rolling-upgrade test needs git (apt-get install git)")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", UPGRADE_FROM],
        cwd=_ROOT,
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        pytest.fail(
            f"commit {UPGRADE_FROM[:12]} is not in this checkout's history (a shallow "
            f"clone? clone without --depth): {archive.stderr.decode(errors='replace')}"
        )
    dest = tmp_path_factory.mktemp("upgrade-from")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="tar")
    return dest


@pytest.fixture
def cluster_tag() -> str:
    return "up"


def _formats(service_url: str, channel: str) -> list[int]:
    """The log format of every entry of ``channel``, in log order."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(
            f"persistent://public/default/{channel}", pulsar.MessageId.earliest
        )
        found = []
        while reader.has_message_available():
            entry = reader.read_next(timeout_millis=10_000)
            at = entry.message_id()
            raw = BackendMessage(
                PulsarMessageId(at.ledger_id(), at.entry_id(), at.batch_index()),
                entry.data(),
                entry.properties(),
            )
            found.append(entry_format(raw))
        reader.close()
        return found
    finally:
        client.close()


async def test_a_rolling_upgrade_from_the_first_format_keeps_every_append_once(
    make_cluster: Callable[..., TestCluster], stack: StackInfo, old_checkout: Path
) -> None:
    cluster = make_cluster(3)
    await cluster.store.start()
    for node_id in (1, 2, 3):
        old = cluster.node(node_id)
        old.cwd = old_checkout
        # and that commit's lab: the command line loads the lab's commands, and this
        # checkout's lab imports this checkout's product
        await old.start(env={"PYTHONPATH": str(old_checkout / "lab")})
    await cluster.wait_balanced()
    async with ClusterClient([stack.etcd_endpoint], key_prefix=cluster.prefix) as client:
        writers = {c: Writer(client, c) for c in cluster.channels}
        for writer in writers.values():
            writer.start()
        await asyncio.sleep(1.0)
        for node_id in (1, 2, 3):
            node = cluster.nodes[node_id]
            assert await node.stop(signal.SIGTERM) == 0
            node.cwd = None  # this checkout's code from now on
            await cluster.restart(node_id)
            await cluster.wait_balanced()
            await asyncio.sleep(0.5)
        # every node reads the new format now: a channel opened from here on writes it
        moved = cluster.channels[0]
        owner = (await cluster.view()).assignments[moved].node
        await client.move(moved, 1 if owner != 1 else 2)
        await asyncio.sleep(1.0)
        for writer in writers.values():
            await writer.stop()
    for channel, writer in writers.items():
        assert writer.acks, channel
        assert not [f for f in writer.failures if f.outcome == "not-written"], channel
        report = await verify_channel(
            stack.pulsar_url, channel, acks=writer.acks, failures=writer.failures
        )
        assert report.ok, (channel, report.summary())
        assert report.acks_checked == len(writer.acks)
    formats = await asyncio.to_thread(_formats, stack.pulsar_url, moved)
    assert formats[0] == 1, "the old nodes wrote the first format"
    assert formats[-1] == 2, "after the upgrade and a move the channel is in the new format"
    first_new = formats.index(2)
    assert set(formats[first_new:]) == {2}, "no old-format entry after the first new one"
