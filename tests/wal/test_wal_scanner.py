"""Scanners: delivery policies, vchannel filter, switching between backend and buffer."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.errors import ClosedError, InvalidInputError
from streamwal.wal import (
    WAL,
    DeliveryPolicy,
    ImmutableMessage,
    open_read_only,
)
from streamwal.wal.backend import BackendMessage
from tests.wal.testkit import (
    OpenOwner,
    OpenReader,
    ProxyBackend,
    RecordingOpener,
    fast_config,
    insert,
    log_messages,
    take,
    wait_until,
)

#: what the ``open_reader`` fixture (tests/wal/conftest.py) opens readers with


async def _previous_owner(open_owner: OpenOwner, payloads: list[bytes]) -> WAL:
    """An owner that appended ``payloads`` and was then closed."""
    wal = await open_owner(node_id=1)
    for payload in payloads:
        await wal.append(insert(payload))
    await wal.close()
    return wal


async def test_read_all_catches_up_from_the_backend_then_tails_the_buffer(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    await _previous_owner(open_owner, [b"a", b"b"])
    wal = await open_owner(node_id=2)
    scanner = await wal.read(DeliveryPolicy.all())
    assert scanner.source == "backend"
    caught_up = await take(scanner, 4)  # tt1, a, b, tt2
    assert caught_up == log_messages(store, channel)
    assert scanner.source == "buffer"  # reached this owner's first time tick
    result = await wal.append(insert(b"c"))
    (live,) = await take(scanner, 1)
    assert live.message_id == result.message_id and live.payload == b"c"
    assert live == log_messages(store, channel)[-1]


async def test_read_latest_sees_only_new_messages(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    await wal.append(insert(b"old"))
    scanner = await wal.read(DeliveryPolicy.latest())
    assert scanner.source == "buffer"
    await wal.append(insert(b"new"))
    assert [m.payload for m in await take(scanner, 1)] == [b"new"]


async def test_start_from_and_start_after_a_message_id(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    results = [await wal.append(insert(b"%d" % i)) for i in range(4)]
    scanner = await wal.read(DeliveryPolicy.start_from(results[1].message_id))
    assert [m.payload for m in await take(scanner, 3)] == [b"1", b"2", b"3"]
    scanner = await wal.read(DeliveryPolicy.start_after(results[1].message_id))
    assert [m.payload for m in await take(scanner, 2)] == [b"2", b"3"]
    assert scanner.source == "buffer"
    with pytest.raises(InvalidInputError):
        await wal.read(DeliveryPolicy.start_from(MemoryMessageId(999)))


async def test_start_from_a_time_tick_in_the_buffer(open_owner: OpenOwner) -> None:
    wal = await open_owner()
    results = [await wal.append(insert(b"%d" % i)) for i in range(4)]
    scanner = await wal.read(DeliveryPolicy.start_from_time_tick(results[2].time_tick))
    assert scanner.source == "buffer"
    assert [m.payload for m in await take(scanner, 2)] == [b"2", b"3"]


async def test_start_from_a_time_tick_older_than_the_buffer(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    await _previous_owner(open_owner, [b"a", b"b", b"c"])
    old = log_messages(store, channel)
    wal = await open_owner(node_id=2)
    scanner = await wal.read(DeliveryPolicy.start_from_time_tick(old[2].time_tick))
    assert scanner.source == "backend"
    got = await take(scanner, 3)
    assert [m.payload for m in got] == [b"b", b"c", b""]
    assert got[-1].message_id == wal.first_message_id
    assert scanner.source == "buffer"


async def test_the_vchannel_filter(open_owner: OpenOwner) -> None:
    wal = await open_owner()
    scanner = await wal.read(DeliveryPolicy.latest(), vchannel="v1")
    for payload, vchannel in [(b"1", "v1"), (b"2", "v2"), (b"3", ""), (b"4", "v1")]:
        await wal.append(insert(payload, vchannel))
    assert [m.payload for m in await take(scanner, 3)] == [b"1", b"3", b"4"]


async def test_evicted_readers_fall_back_to_the_backend_and_lose_nothing(
    store: MemoryLogStore,
    channel: str,
    open_owner: OpenOwner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="streamwal.wal.scanner")
    wal = await open_owner(config=fast_config(buffer_capacity_bytes=600))
    await wal.append(insert(b"0"))
    scanner = await wal.read(DeliveryPolicy.all())
    await take(scanner, 2)
    assert scanner.source == "buffer"
    for i in range(1, 40):  # far more than the buffer holds, while the reader waits
        await wal.append(insert(b"%d" % i))
    got = await take(scanner, 39)
    assert [m.payload for m in got] == [b"%d" % i for i in range(1, 40)]
    assert scanner.source == "buffer"  # fell back, caught up, switched again
    assert any("falls back to the backend" in r.getMessage() for r in caplog.records)
    (late,) = [await wal.append(insert(b"late"))]
    assert (await take(scanner, 1))[0].message_id == late.message_id


async def test_concurrent_scanners_and_appenders_see_the_log_exactly(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(buffer_capacity_bytes=2000))
    total = 400

    async def appender(k: int) -> None:
        for i in range(total // 4):
            await wal.append(insert(b"%d-%d" % (k, i)))
            if i % 5 == 0:
                await asyncio.sleep(0)

    async def reader(delay: float) -> list[ImmutableMessage]:
        await asyncio.sleep(delay)
        scanner = await wal.read(DeliveryPolicy.all())
        got: list[ImmutableMessage] = []
        while len(got) < total + 1:
            got.append(await asyncio.wait_for(scanner.__anext__(), 2.0))
            if len(got) % 17 == 0:
                await asyncio.sleep(0.001)  # slow reader: falls behind the buffer
        await scanner.close()
        return got

    readers = [asyncio.create_task(reader(d)) for d in (0, 0.001, 0.005)]
    await asyncio.gather(*(appender(k) for k in range(4)))
    log = log_messages(store, channel)
    for result in await asyncio.gather(*readers):
        assert result == log[: total + 1]


async def test_undecodable_entries_are_skipped_and_counted(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    await _previous_owner(open_owner, [b"a"])
    log = store.log(channel)
    log.entries.append(BackendMessage(MemoryMessageId(len(log.entries)), b"foreign", {}))
    wal = await open_owner(node_id=2)
    scanner = await wal.read(DeliveryPolicy.all())
    got = await take(scanner, 3)
    assert [m.payload for m in got] == [b"", b"a", b""]
    assert got[-1].message_id == wal.first_message_id
    assert scanner.skipped == 1


async def test_a_read_only_wal_reads_the_backend(
    open_owner: OpenOwner, open_reader: OpenReader
) -> None:
    wal = await open_owner()
    await wal.append(insert(b"a"))
    reader = await open_reader()
    scanner = await reader.read(DeliveryPolicy.all())
    latest = await reader.read(DeliveryPolicy.latest())
    assert [m.payload for m in await take(scanner, 2)] == [b"", b"a"]
    await wal.append(insert(b"b"))
    assert [m.payload for m in await take(scanner, 1)] == [b"b"]
    assert [m.payload for m in await take(latest, 1)] == [b"b"]
    assert scanner.source == "backend"
    assert not wal.is_fenced  # reading fenced nobody
    await reader.close()
    with pytest.raises(ClosedError):
        await scanner.__anext__()
    with pytest.raises(ClosedError):
        await reader.read()


async def test_the_watermark_follows_in_memory_time_ticks(open_owner: OpenOwner) -> None:
    wal = await open_owner(config=fast_config(time_tick_interval=0.002))
    scanner = await wal.read(DeliveryPolicy.latest())
    pending = asyncio.create_task(scanner.__anext__())
    start = scanner.watermark
    await wait_until(lambda: scanner.watermark > start)
    assert not pending.done()  # in-memory ticks are not delivered
    result = await wal.append(insert(b"x"))
    assert (await asyncio.wait_for(pending, 2.0)).message_id == result.message_id


async def test_closing_a_scanner_wakes_its_reader(
    open_owner: OpenOwner, open_reader: OpenReader
) -> None:
    wal = await open_owner()
    on_buffer = await wal.read(DeliveryPolicy.latest())
    reader = await open_reader()
    on_backend = await reader.read(DeliveryPolicy.latest())
    for scanner in (on_buffer, on_backend):
        pending = asyncio.create_task(scanner.__anext__())
        await asyncio.sleep(0.001)
        await scanner.close()
        await scanner.close()  # idempotent
        with pytest.raises(ClosedError):
            await asyncio.wait_for(pending, 2.0)


async def test_retriable_backend_errors_reopen_where_the_scanner_was(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    results = [await wal.append(insert(b"%d" % i)) for i in range(3)]
    opener = RecordingOpener(store, proxy=True)
    reader = await open_read_only(opener, channel, fast_config())
    (backend,) = opener.opened
    assert isinstance(backend, ProxyBackend)
    backend.fail_reads = 2
    scanner = await reader.read(DeliveryPolicy.all())
    first_two = await take(scanner, 2)
    backend.fail_scans = 1
    backend.fail_reads = 1
    rest = await take(scanner, 2)
    assert [m.payload for m in first_two + rest] == [b"", b"0", b"1", b"2"]
    assert backend.reads[-1] == DeliveryPolicy.start_after(results[0].message_id)
    await reader.close()
