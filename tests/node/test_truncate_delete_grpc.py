"""Truncating to an id and deleting a channel through a real node process (gRPC), and
``streamwal channel delete`` against the shared broker.

The broker keeps everything, so a truncation is seen in what reads answer; a delete
is seen in the broker's admin API (the topic and its subscriptions gone, nothing
created again by a second delete).
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.cli import main
from streamwal.exitcodes import FAILED, NOT_FOUND, OK
from streamwal.node.client import NodeClient, policy
from streamwal.node.client.answers import Consumed
from streamwal.node.client_errors import (
    NodeChannelInUseError,
    NodeChannelNotFoundError,
    NodeInvalidInputError,
    NodeTruncatedError,
)
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, streamwal_cli

pytestmark = pytest.mark.integration


async def _payloads(
    client: NodeClient, channel: str, delivery: object, count: int, batch: bool = False
) -> list[bytes]:
    """The payloads of the next ``count`` messages produced (time ticks skipped)."""
    got: list[bytes] = []

    def keep(m: Consumed) -> None:
        if m.payload.startswith(b"m-"):
            got.append(m.payload)

    if batch:
        async for frame in client.consume_batches(channel, delivery, timeout=30):  # type: ignore[arg-type]
            for m in frame:
                keep(m)
            if len(got) >= count:
                break
    else:
        async for m in client.consume(channel, delivery, timeout=30):  # type: ignore[arg-type]
            keep(m)
            if len(got) >= count:
                break
    return got[:count]


async def test_truncate_to_an_id_through_the_node(
    node: NodeProcess, channel: str, stack: StackInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    async with NodeClient(node.address) as client:
        await client.assign(channel)
        acked = [await client.produce(channel, f"m-{i}".encode()) for i in range(12)]
        sent = [f"m-{i}".encode() for i in range(12)]

        # a consumer behind the id asked for clamps it: the answer says where it stopped
        await client.checkpoint(channel, "indexer", acked[3].message_id, acked[3].time_tick)
        clamped = await client.truncate(channel, up_to=acked[6].message_id)
        assert clamped.moved and clamped.truncated_through
        assert clamped.truncated_through != acked[6].message_id
        assert await _payloads(client, channel, policy("all"), 3) == sent[3:6]
        resumed = policy("after_checkpoint", consumer="indexer")
        assert await _payloads(client, channel, resumed, 2) == sent[4:6]

        await client.remove_checkpoint(channel, "indexer")
        done = await client.truncate(channel, up_to=acked[6].message_id)
        assert done.moved and done.truncated_through == acked[6].message_id
        assert done.truncated_through_text == acked[6].message_id_text
        state = await client.retention(channel)
        assert state.truncated_before == b""  # the retention rule's point is its own

        # all (both read RPCs) starts right after the id
        assert await _payloads(client, channel, policy("all"), 5) == sent[7:]
        assert await _payloads(client, channel, policy("all"), 5, batch=True) == sent[7:]
        # from the id (or before) is truncated; after it is where the log goes on
        for asked in (acked[0], acked[6]):
            with pytest.raises(NodeTruncatedError) as early:
                await _payloads(
                    client, channel, policy("start_from", message_id=asked.message_id), 1
                )
            assert early.value.code().name == "OUT_OF_RANGE"
            assert acked[6].message_id_text in early.value.details()
        after = policy("start_after", message_id=acked[6].message_id)
        assert await _payloads(client, channel, after, 5) == sent[7:]

        # the same id again: nothing new, said so
        again = await client.truncate(channel, up_to=acked[6].message_id)
        assert not again.moved and again.truncated_through == b""

        # bad ids: malformed, past the end; nothing truncated
        for bad in (b"\x01\x02\x03", acked[-1].message_id[:8] + b"\x7f" * 12):
            with pytest.raises(NodeInvalidInputError) as refused:
                await client.truncate(channel, up_to=bad)
            assert refused.value.code().name == "INVALID_ARGUMENT"
        with pytest.raises(NodeInvalidInputError):
            await client.truncate(channel, retention_s=0, up_to=acked[8].message_id)
        assert await _payloads(client, channel, policy("all"), 5) == sent[7:]

    status_cmd = ["channel", "status", channel, "--pulsar", stack.pulsar_url]
    assert await asyncio.to_thread(main, [*status_cmd, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["truncated_through"] == acked[6].message_id_text
    assert status["truncated_before"] is None
    assert await asyncio.to_thread(main, status_cmd) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line == f"  truncated through: {acked[6].message_id_text} (inclusive)"


async def _topics(stack: StackInfo) -> set[str]:
    listed = await PulsarAdmin(stack.pulsar_admin_url).get("persistent/public/default")
    return set(listed or [])


async def test_delete_a_channel_through_the_node(
    node: NodeProcess, channel: str, stack: StackInfo
) -> None:
    admin = PulsarAdmin(stack.pulsar_admin_url)
    topic = PulsarConfig(service_url=stack.pulsar_url).topic(channel)
    path = PulsarAdmin.topic_path(topic)
    async with NodeClient(node.address) as client:
        await client.assign(channel)
        acked = await client.produce(channel, b"m-0")
        await client.checkpoint(channel, "indexer", acked.message_id, acked.time_tick)
        await client.truncate(channel, up_to=acked.message_id)
        subscriptions = set(await admin.get(f"{path}/subscriptions"))
        assert "streamwal-consumer-indexer" in subscriptions and len(subscriptions) >= 2

        # served here: refused, nothing deleted
        with pytest.raises(NodeChannelInUseError) as served:
            await client.delete_channel(channel)
        assert served.value.code().name == "FAILED_PRECONDITION"
        assert "serves it" in served.value.details()
        assert topic in await _topics(stack)
        assert set(await admin.get(f"{path}/subscriptions")) == subscriptions

        await client.remove(channel)
        deleted = await client.delete_channel(channel)
        assert deleted.subscriptions_deleted == len(subscriptions)
        assert deleted.keys_deleted == 1  # the channel's term, in the nodes' etcd
        assert topic not in await _topics(stack)
        assert await admin.get(f"{path}/subscriptions") is None

        # a second delete: not found, and nothing was created to find out
        with pytest.raises(NodeChannelNotFoundError) as gone:
            await client.delete_channel(channel)
        assert gone.value.code().name == "NOT_FOUND"
        assert "does not exist" in gone.value.details()
        with pytest.raises(NodeInvalidInputError):
            await client.delete_channel("not a channel name")
        await asyncio.sleep(1.0)
        assert topic not in await _topics(stack)


async def _delete(*args: str) -> subprocess.CompletedProcess[str]:
    return await streamwal_cli("channel", "delete", *args)


async def test_channel_delete_command_exit_codes(
    node: NodeProcess, channel: str, stack: StackInfo
) -> None:
    topic = PulsarConfig(service_url=stack.pulsar_url).topic(channel)
    where = ("--pulsar", stack.pulsar_url, "--admin", stack.pulsar_admin_url)
    async with NodeClient(node.address) as client:
        await client.assign(channel)
        await client.produce(channel, b"m-0")

        served = await _delete(channel, *where, "--yes")
        assert served.returncode == FAILED, served
        assert "in use" in served.stderr and "producer" in served.stderr
        unasked = await _delete(channel, *where)
        assert unasked.returncode == FAILED and "--yes" in unasked.stderr, unasked
        assert topic in await _topics(stack)

        await client.remove(channel)
    done = await _delete(channel, "--config", str(node.config_path), *where, "--yes")
    assert done.returncode == OK, done
    assert f"topic {topic} deleted" in done.stdout
    assert "term forgotten (1 key)" in done.stdout
    assert topic not in await _topics(stack)

    again = await _delete(channel, *where, "--yes")
    assert again.returncode == NOT_FOUND, again
    assert "does not exist" in again.stderr
    assert topic not in await _topics(stack)
