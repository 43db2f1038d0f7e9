"""Moving one channel touches no other channel of the same opener and client.

One channel moves between two openers (a takeover each time, while its old owner has
appends in flight); its neighbours write through the same shared writer client the
whole time. A broker closes the shared connection when the fenced producer's sends
arrive, so every neighbour reconnects and has its pending appends answered as copies:
they must still be acknowledged at their place in the log, and none may fail.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from streamwal.adaptors.pulsar import PulsarBackendWAL, PulsarConfig, PulsarOpener
from streamwal.adaptors.pulsar.metrics import READ_BACK, UNPLACED, segment_count
from streamwal.adaptors.testing import writable
from streamwal.errors import StreamwalError
from streamwal.wal.backend import append_entry
from streamwal.wal.message_id import MessageId
from streamwal_lab.stack import StackInfo
from tests.adaptors.pulsar.topic_log import keep_appending, key, read_log

pytestmark = pytest.mark.integration

NEIGHBOURS = 3
APPENDERS_EACH = 2
MOVES = 20


async def _burst_until_fenced(wal: PulsarBackendWAL, stop: asyncio.Event) -> None:
    """The moving channel's owner writes until its channel moves (then it is refused)."""
    seq = 0
    while not stop.is_set():
        sends = [append_entry(wal, f"moving-{seq + i}".encode(), {}) for i in range(16)]
        seq += 16
        results = await asyncio.gather(*sends, return_exceptions=True)
        if any(isinstance(r, StreamwalError) for r in results):
            return


async def _writer(opener: PulsarOpener, channel: str) -> PulsarBackendWAL:
    wal = await writable(opener, channel)
    assert isinstance(wal, PulsarBackendWAL)
    return wal


async def test_twenty_moves_of_one_channel_fail_no_append_of_its_neighbours(
    stack: StackInfo, unique: str
) -> None:
    config = PulsarConfig(service_url=stack.pulsar_url, writer_clients=1)
    moving = f"moving-{unique}"
    names = [f"neighbour-{i}-{unique}" for i in range(NEIGHBOURS)]
    acked: dict[str, list[tuple[MessageId, bytes]]] = {name: [] for name in names}
    failed: dict[str, list[BaseException]] = {name: [] for name in names}
    stop = asyncio.Event()
    async with PulsarOpener(config) as home, PulsarOpener(config) as away:
        neighbours = [await _writer(home, name) for name in names]
        owner = await _writer(home, moving)
        shared = {wal._state.writer_client for wal in [*neighbours, owner]}
        assert len(shared) == 1  # the moving channel and its neighbours share a client
        writers = [
            asyncio.create_task(keep_appending(wal, f"{name}-{w}", stop, acked[name], failed[name]))
            for wal, name in zip(neighbours, names, strict=True)
            for w in range(APPENDERS_EACH)
        ]
        try:
            for move in range(MOVES):
                burst_stop = asyncio.Event()
                burst = asyncio.create_task(_burst_until_fenced(owner, burst_stop))
                await asyncio.sleep(0.15)
                before = {name: len(acked[name]) for name in names}
                successor = await _writer(away if move % 2 == 0 else home, moving)
                burst_stop.set()
                await burst
                await owner.close()
                owner = successor
                await asyncio.sleep(0.15)
                for name in names:  # the neighbours write on across every move
                    assert len(acked[name]) > before[name], (move, name)
        finally:
            stop.set()
            await asyncio.gather(*writers)
            with contextlib.suppress(Exception):
                await owner.close()
        for wal in neighbours:
            await wal.close()
    # the hazard was there: the shared connection was cut under the neighbours, whose
    # appends came back as copies and were placed from the log
    assert sum(segment_count(name, READ_BACK) for name in names) > 0
    for name in names:
        assert segment_count(name, UNPLACED) == 0
        assert not failed[name], f"{name}: {len(failed[name])} failed, first {failed[name][0]!r}"
        log = await asyncio.to_thread(read_log, stack.pulsar_url, config.topic(name))
        misplaced = [(at, p) for at, p in acked[name] if log.get(key(at)) != p]
        assert not misplaced, f"{name}: {len(misplaced)} not at their id: {misplaced[:3]}"
        assert len(log) == len(acked[name]) == len(set(log.values()))
