"""Takeover on the real broker while the old owner is still appending."""

from __future__ import annotations

import asyncio
import contextlib

import pulsar
import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.adaptors.pulsar.scanner import to_backend_message
from streamwal.adaptors.testing import writable
from streamwal.errors import ChannelFencedError, UnknownPositionError
from streamwal.wal.backend import BackendMessage, append_entry
from streamwal.wal.message_id import MessageId
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration


async def test_takeover_during_appends_loses_nothing_acknowledged(
    stack: StackInfo, unique: str
) -> None:
    channel = f"takeover-{unique}"
    config = PulsarConfig(service_url=stack.pulsar_url)
    async with PulsarOpener(config) as node_a, PulsarOpener(config) as node_b:
        a = await writable(node_a, channel)
        acked_a: list[tuple[MessageId, bytes]] = []
        per_writer: list[list[MessageId]] = [[] for _ in range(4)]
        fenced = asyncio.Event()
        warmed_up = asyncio.Event()

        async def keep_appending(writer: int) -> None:
            seq = 0
            while True:
                payload = f"a-{writer}-{seq}".encode()
                try:
                    message_id = await append_entry(a, payload, {"who": "a"})
                except ChannelFencedError:
                    fenced.set()
                    return
                except UnknownPositionError:
                    # not acknowledged: the fence may cut a segment this append was in
                    # (docs/reliability.md, "Known limits"); the next one is refused
                    seq += 1
                    continue
                acked_a.append((message_id, payload))
                per_writer[writer].append(message_id)
                if len(acked_a) >= 200:
                    warmed_up.set()
                seq += 1

        writers = [asyncio.create_task(keep_appending(w)) for w in range(4)]
        await asyncio.wait_for(warmed_up.wait(), 30)
        b = await writable(node_b, channel)
        await asyncio.wait_for(fenced.wait(), 10)
        for task in writers:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with pytest.raises(ChannelFencedError):
            await append_entry(a, b"a-after-takeover", {"who": "a"})
        acked_b = [await append_entry(b, f"b-{i}".encode(), {"who": "b"}) for i in range(20)]
        # B's last word: an entry of A landing late would be after it, or between B's
        acked_b.append(await append_entry(b, b"b-sentinel", {"who": "b"}))
        await a.close()  # A's producer is gone: nothing of A can land after this read

        log = await read_to_the_end(node_b, config.topic(channel))
        ids = [e.message_id for e in log]
        assert ids == sorted(ids)
        by_id = {e.message_id: e for e in log}
        for message_id, payload in acked_a:
            assert by_id[message_id].payload == payload  # every acknowledged append is there
        first_b = next(i for i, e in enumerate(log) if e.properties["who"] == "b")
        after_a = [e for e in log[first_b:] if e.properties["who"] != "b"]
        assert not after_a, f"entries of the old owner after the takeover: {after_a[:5]}"
        assert [e.message_id for e in log[first_b:]] == acked_b
        assert log[-1].payload == b"b-sentinel"
        # each writer appended one at a time: its acknowledgements are in log order
        for acks in per_writer:
            assert acks == sorted(acks)
        await b.close()


async def read_to_the_end(opener: PulsarOpener, topic: str) -> list[BackendMessage]:
    """Every entry of ``topic`` up to the broker's last one, not just up to a known id."""
    reader = await opener.client.create_reader(topic, pulsar.MessageId.earliest)
    log: list[BackendMessage] = []
    try:
        while await reader.has_message_available():
            log.append(to_backend_message(await asyncio.wait_for(reader.read_next(), 10)))
    finally:
        await reader.close()
    return log
