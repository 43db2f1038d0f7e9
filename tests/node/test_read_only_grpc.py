"""``ConsumeRequest.read_only`` through the real servicer and client (unit: the
in-process backend): bad names and missing channels are refused without creating
anything; on the owning node too, a read-only read sees the owner's reader's ids."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import cast

import grpc
import pytest

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.node.client import Consumed, NodeClient, policy
from tests.node.memory_node import read_from_start
from tests.node.test_exactly_once_grpc import CHANNEL, client, node

__all__ = ["client", "node"]  # the fixtures: one node over an in-process store, its client


async def test_a_bad_name_is_invalid_and_a_missing_channel_not_found_creating_nothing(
    node: tuple[str, MemoryLogStore],
) -> None:
    address, store = node
    async with NodeClient(address, tracing=False) as client:
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await read_from_start(client, "not a name", 1, read_only=True)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await read_from_start(client, "nobody-here", 1, read_only=True)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        assert "does not exist" in (missing.value.details() or "")
    assert not store.exists("nobody-here")


async def test_the_owning_node_serves_read_only_reads_with_its_readers_ids(
    client: NodeClient,
) -> None:
    acked = [await client.produce(CHANNEL, f"m-{i}".encode()) for i in range(4)]
    owner = await read_from_start(client, CHANNEL, 5, read_only=False)
    read_only = await read_from_start(client, CHANNEL, 5, read_only=True)
    assert [m.message_id for m in read_only] == [m.message_id for m in owner]
    assert [m.message_id for m in read_only[1:]] == [a.message_id for a in acked]
    frames = cast(
        AsyncGenerator[list[Consumed], None],
        client.consume_batches(CHANNEL, policy("all"), read_only=True, timeout=5),
    )
    async with contextlib.aclosing(frames):
        first = await anext(frames)
    assert [m.message_id for m in first] == [m.message_id for m in owner][: len(first)]
    # the owner is untouched: it still owns the channel and appends
    await client.produce(CHANNEL, b"after")
    listed = await client.list_channels()
    assert [(c.pchannel, c.fenced) for c in listed.channels] == [(CHANNEL, False)]
