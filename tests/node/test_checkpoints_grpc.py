"""Checkpoints, retention and truncation through a node's gRPC API and the CLI.

On the shared stack's broker (which keeps everything, so truncation only moves the
truncation point there; the broker deleting data is tested on a stock broker in
tests/adaptors/pulsar/test_truncation.py).
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from streamwal.cli import main
from streamwal.node.client import NodeClient, policy
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration


async def test_checkpoint_resume_truncate_and_status_through_the_node(
    node: NodeProcess, stack: StackInfo, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    channel = f"ckpt-{unique}"
    async with NodeClient(node.address) as client:
        await client.assign(channel)
        # one by one: each append its own entry, as backlogs are counted in entries
        acked = [await client.produce(channel, f"m-{i}".encode()) for i in range(30)]
        keep = acked[19]
        await client.checkpoint(channel, "indexer", keep.message_id, keep.time_tick)
        await client.checkpoint(channel, "flusher", acked[25].message_id, acked[25].time_tick)

        state = await client.retention(channel)
        assert [c.consumer for c in state.consumers] == ["flusher", "indexer"]
        indexer = state.consumers[1]
        assert (indexer.message_id, indexer.time_tick) == (keep.message_id, keep.time_tick)
        assert indexer.backlog_messages > state.consumers[0].backlog_messages >= 0
        assert state.latest_time_tick >= acked[-1].time_tick
        assert state.truncated_before == b""

        # resuming after a consumer's checkpoint starts at the next message
        resumed = [
            m
            async for m in client.consume(
                channel, policy("after_checkpoint", consumer="indexer"), limit=1
            )
        ]
        assert resumed[0].message_id != keep.message_id
        assert resumed[0].time_tick > keep.time_tick

        # the slowest consumer holds truncation back, whatever the window says
        truncated = await client.truncate(channel, retention_s=0)
        assert truncated.moved and truncated.truncated_before == keep.message_id
        with pytest.raises(grpc.aio.AioRpcError) as early:
            async for _ in client.consume(
                channel, policy("start_from", message_id=acked[0].message_id), limit=1
            ):
                pass
        assert early.value.code() == grpc.StatusCode.OUT_OF_RANGE
        assert str(keep.message_id_text) in (early.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await client.checkpoint(channel, "late", acked[3].message_id, acked[3].time_tick)
        assert late.value.code() == grpc.StatusCode.OUT_OF_RANGE

        await client.remove_checkpoint(channel, "indexer")
        again = await client.truncate(channel, retention_s=0)
        assert again.moved and again.truncated_before == acked[25].message_id

    status_cmd = ["channel", "status", channel, "--pulsar", stack.pulsar_url]
    assert await asyncio.to_thread(main, [*status_cmd, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["truncated_before"] == acked[25].message_id_text
    assert [c["consumer"] for c in status["consumers"]] == ["flusher"]
    assert status["consumers"][0]["backlog_messages"] >= 1
    assert status["latest_time_tick"] >= acked[-1].time_tick

    assert await asyncio.to_thread(main, status_cmd) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"channel {channel} (persistent://public/default/{channel})")
    assert lines[1] == f"  truncated before: {acked[25].message_id_text}"
    assert lines[2].startswith("  storage: ")
    assert lines[4] == "  consumers:"
    assert lines[5].startswith(f"    flusher: checkpoint {acked[25].message_id_text} at ")
    assert lines[5].endswith(" s behind")
