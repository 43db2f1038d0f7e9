"""Three owners in turn on one channel, on real Pulsar and a real etcd-backed TSO.

Each owner runs concurrent appenders until the next owner opens the channel (which
fences it). A raw reader of the whole topic must then see strictly increasing time
ticks, every acknowledged append exactly once, and each owner starting with a
TimeTick above everything before it. Scanners started before, during and after the
takeovers must see the same sequence.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.errors import ChannelFencedError, UnknownPositionError
from streamwal.tso import InProcessTSO
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import read_topic
from streamwal.verify.history import check_history
from streamwal.wal.initializing import open_read_only, open_wal
from streamwal.wal.message import ImmutableMessage, MessageType, MutableMessage
from streamwal.wal.message.codec import decode_entry
from streamwal.wal.scanner import Scanner
from streamwal.wal.wal import WAL
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration

APPENDS_PER_OWNER = 150


async def collect(scanner: Scanner, until: asyncio.Event, out: list[ImmutableMessage]) -> None:
    async for msg in scanner:
        out.append(msg)
        if until.is_set() and msg.type is MessageType.INSERT and msg.payload == b"last":
            return


async def run_owner(wal: WAL, owner: int, acks: list[Ack], enough: asyncio.Event) -> None:
    count = 0

    async def appender(worker: int) -> None:
        nonlocal count
        seq = 0
        while True:
            payload = f"o{owner}-w{worker}-{seq}".encode()
            try:
                result = await wal.append(MutableMessage(MessageType.INSERT, payload))
            except ChannelFencedError:
                return
            except UnknownPositionError:
                # not acknowledged: the fence may cut a segment this append was in
                # (docs/reliability.md, "Known limits"); the next one is refused
                seq += 1
                continue
            acks.append(Ack(result.message_id.to_bytes(), result.time_tick, digest(payload)))
            seq += 1
            count += 1
            if count >= APPENDS_PER_OWNER:
                enough.set()

    await asyncio.gather(*(appender(w) for w in range(4)))


async def test_three_owners_in_turn(stack: StackInfo, unique: str, tso: InProcessTSO) -> None:
    channel = f"wal-owners-{unique}"
    pulsar = PulsarConfig(service_url=stack.pulsar_url)
    acks: list[Ack] = []
    seen_before: list[ImmutableMessage] = []
    seen_during: list[ImmutableMessage] = []
    done = asyncio.Event()
    openers = [PulsarOpener(pulsar) for _ in range(4)]
    for opener in openers:
        await opener.start()
    reader = await open_read_only(openers[3], channel)
    before = await reader.read()
    before_task = asyncio.create_task(collect(before, done, seen_before))

    wals: list[WAL] = []
    owners: list[asyncio.Task[None]] = []
    during_task: asyncio.Task[None] | None = None
    for owner in (1, 2, 3):
        wal = await open_wal(openers[owner - 1], channel, tso.allocator(), owner)
        wals.append(wal)
        if owner == 2:
            during = await wal.read()
            during_task = asyncio.create_task(collect(during, done, seen_during))
        enough = asyncio.Event()
        owners.append(asyncio.create_task(run_owner(wal, owner, acks, enough)))
        await asyncio.wait_for(enough.wait(), 60)
    # the earlier owners' appenders stopped on their own when fenced
    await asyncio.wait_for(asyncio.gather(*owners[:2]), 30)
    assert wals[0].is_fenced and wals[1].is_fenced and not wals[2].is_fenced
    owners[2].cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await owners[2]
    done.set()
    last = await wals[2].append(MutableMessage(MessageType.INSERT, b"last"))
    acks.append(Ack(last.message_id.to_bytes(), last.time_tick, digest(b"last")))
    assert during_task is not None
    await asyncio.wait_for(asyncio.gather(before_task, during_task), 60)

    after_reader = await open_read_only(openers[3], channel)
    after = await after_reader.read()
    seen_after: list[ImmutableMessage] = []
    await asyncio.wait_for(collect(after, done, seen_after), 60)

    for wal in wals:
        await wal.close()
    await reader.close()
    await after_reader.close()
    for opener in openers:
        await opener.close()

    raw = await read_topic(stack.pulsar_url, pulsar.topic(channel))
    report = check_history(raw, PulsarMessageId.from_bytes, acks)
    assert report.ok, report.summary()
    assert [node for node, _ in report.owners] == [1, 2, 3]
    assert report.acks_checked == len(acks) >= 3 * APPENDS_PER_OWNER
    assert not report.foreign

    # the scanners stop at "last"; a periodic time tick may follow it in the log; an
    # entry is a pack of one or more messages, each with its own id
    log_ids = [str(m.message_id) for e in raw for m in decode_entry(e, PulsarMessageId.from_bytes)]
    log_ids = log_ids[: log_ids.index(str(last.message_id)) + 1]
    assert [str(m.message_id) for m in seen_before] == log_ids
    assert [str(m.message_id) for m in seen_after] == log_ids
    assert [str(m.message_id) for m in seen_during] == log_ids
