"""The scan suite: reading a channel back, from Pulsar and from the write-ahead buffer.

One WAL is filled with ``messages`` appends through ``append_many`` (packed, as a
deployed WAL writes a batch: an entry holds many messages), and a raw channel with as
many messages of the same size by the raw producer
(:func:`~streamwal_lab.bench.raw.fill_raw`: Pulsar's batching); then, ``repeats``
times each, interleaved:

- ``raw_batched``: the raw reader loop over the raw channel
  (:func:`~streamwal_lab.bench.raw.read_raw`): Pulsar messages of the WAL's messages'
  size, the catch-up's baseline;
- ``raw_reader``: a raw Pulsar reader of the WAL's channel from the earliest entry to
  the last (no decoding): it counts entries, packs of many messages, so its figure is
  entries/s, kept for what an entry costs;
- ``catch_up``: a scanner of a read-only WAL (no buffer: every message comes from the
  broker and is decoded);
- ``buffer_tail``: a scanner of the owner's WAL from its first time tick, which the
  write-ahead buffer serves from memory (the path a tailing reader takes).

The time includes opening the reader; figures are messages/s, medians of the repeats.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

import pulsar

from streamwal.adaptors.pulsar import PulsarOpener
from streamwal.tso import InProcessTSO
from streamwal.wal.backend import DeliveryPolicy
from streamwal.wal.initializing import open_read_only, open_wal
from streamwal.wal.message import MessageType, MutableMessage
from streamwal.wal.scanner import SOURCE_BUFFER
from streamwal.wal.wal import WAL, ReadOnlyWAL
from streamwal_lab.bench.raw import fill_raw, read_raw
from streamwal_lab.bench.stats import ratio
from streamwal_lab.bench.target import BenchTarget, new_run
from streamwal_lab.stack.tso_keys import deleted_afterwards

__all__ = [
    "ReadBack",
    "ReadBackOptions",
    "fill_wal",
    "fill_wal_batches",
    "run_scan_bench",
    "timed_scan",
]

_FILL_APPENDERS = 64
_FILL_BATCH = 500
_FILL_CALLERS = 4


class ReadBackOptions(TypedDict, total=False):
    """The keywords of both read-back suites (``scan``, ``reads``), as the command line
    declares them once for both; what a caller leaves out takes :class:`ReadBack`'s
    defaults."""

    messages: int
    payload_bytes: int
    repeats: int


@dataclass(frozen=True)
class ReadBack:
    """One run of a read-back suite: ``messages`` of ``payload_bytes`` fill its channel
    (and as many a raw topic of its own), then each kind of read runs ``repeats`` times."""

    suite: str
    messages: int = 20_000
    payload_bytes: int = 128
    repeats: int = 3
    run: str = field(default_factory=new_run)

    def name(self, *parts: str) -> str:
        """A name of this run's, ``bench-<suite>[-<parts>]-<run>``: its channel (no
        parts), the raw topic (``raw``)."""
        return "-".join(("bench", self.suite, *parts, self.run))

    def figures(self) -> dict[str, int]:
        """The run's sizes as the suites' results record them."""
        return {
            "messages": self.messages,
            "payload_bytes": self.payload_bytes,
            "repeats": self.repeats,
        }


async def fill_wal(wal: WAL, messages: int, payload: bytes) -> None:
    """``messages`` inserts of ``payload``, from many appenders at once (a quick fill)."""
    remaining = iter(range(messages))

    async def appender() -> None:
        for _ in remaining:
            await wal.append(MutableMessage(MessageType.INSERT, payload))

    await asyncio.gather(*(appender() for _ in range(_FILL_APPENDERS)))


async def fill_wal_batches(wal: WAL, messages: int, payload: bytes) -> None:
    """``messages`` inserts of ``payload`` through ``append_many``, a few batches at a
    time: the packs a deployed WAL writes for batches."""
    remaining = iter(range(0, messages, _FILL_BATCH))

    async def caller() -> None:
        for start in remaining:
            count = min(_FILL_BATCH, messages - start)
            await wal.append_many([MutableMessage(MessageType.INSERT, payload)] * count)

    await asyncio.gather(*(caller() for _ in range(_FILL_CALLERS)))


async def timed_scan(
    wal: WAL | ReadOnlyWAL, policy: DeliveryPolicy, inserts: int
) -> tuple[float, int, str]:
    """Seconds to read ``inserts`` data messages; messages read in all; the last source."""
    started = time.perf_counter()
    scanner = await wal.read(policy)
    seen = read = 0
    try:
        async for msg in scanner:
            read += 1
            if msg.type is MessageType.INSERT:
                seen += 1
                if seen == inserts:
                    break
        return time.perf_counter() - started, read, scanner.source
    finally:
        await scanner.close()


async def _raw_scan(client: Any, topic: str) -> tuple[float, int]:
    """Seconds to read every entry of ``topic``, and how many: a WAL that packs its
    appends writes fewer entries than messages."""
    started = time.perf_counter()
    reader = await client.create_reader(topic, pulsar.MessageId.earliest)
    read = 0
    try:
        while await reader.has_message_available():
            await reader.read_next()
            read += 1
        return time.perf_counter() - started, read
    finally:
        await reader.close()


async def run_scan_bench(target: BenchTarget, **options: Unpack[ReadBackOptions]) -> dict[str, Any]:
    """Fill one channel, then read it back three ways; see the module docstring."""
    read_back = ReadBack("scan", **options)
    messages, payload = read_back.messages, b"s" * read_back.payload_bytes
    channel = read_back.name()
    config = target.pulsar_config()
    tso_config = target.tso_config(f"/{channel}")
    raw_topic = config.topic(read_back.name("raw"))
    rates: dict[str, list[float]] = {
        "raw_batched": [],
        "raw_reader": [],
        "catch_up": [],
        "buffer_tail": [],
    }
    async with (
        deleted_afterwards(target.etcd_endpoint, [tso_config.key_prefix]),
        InProcessTSO(tso_config) as tso,
        PulsarOpener(config) as opener,
    ):
        wal = await open_wal(opener, channel, tso.allocator(), 1)
        try:
            started = time.perf_counter()
            await fill_wal_batches(wal, messages, payload)
            fill_s = time.perf_counter() - started
            target.progress(f"scan: {messages} messages appended in {fill_s:.1f} s")
            await fill_raw(opener.client, raw_topic, config, messages, payload)
            read_only = await open_read_only(opener, channel)
            try:
                entries = raw_entries = 0
                sources: set[str] = set()
                for _ in range(read_back.repeats):
                    began = time.perf_counter()
                    raw_read = await read_raw(opener.client, raw_topic, messages)
                    rates["raw_batched"].append(raw_read / (time.perf_counter() - began))
                    secs, entries, _ = await timed_scan(read_only, DeliveryPolicy.all(), messages)
                    rates["catch_up"].append(entries / secs)
                    secs, raw_entries = await _raw_scan(opener.client, config.topic(channel))
                    rates["raw_reader"].append(raw_entries / secs)
                    policy = DeliveryPolicy.start_from_time_tick(wal.first_time_tick)
                    secs, read, source = await timed_scan(wal, policy, messages)
                    rates["buffer_tail"].append(read / secs)
                    sources.add(source)
            finally:
                await read_only.close()
        finally:
            await wal.close()
    medians = {name: round(statistics.median(values), 1) for name, values in rates.items()}
    target.progress(
        f"scan: raw producer's channel {medians['raw_batched']:.0f}/s, catch-up "
        f"{medians['catch_up']:.0f}/s, buffer {medians['buffer_tail']:.0f}/s, the WAL's "
        f"channel raw {medians['raw_reader']:.0f} entries/s ({raw_entries} entries)"
    )
    return {
        **read_back.figures(),
        "entries_read": entries,
        "raw_entries": raw_entries,
        "fill_per_s": round(messages / fill_s, 1),
        "per_s": medians,
        "buffer_served_from_memory": sources == {SOURCE_BUFFER},
        "catch_up_vs_raw_batched_ratio": ratio(medians["catch_up"], medians["raw_batched"]),
        # against the raw reader of the WAL's own channel, which counts its entries
        "catch_up_vs_raw_ratio": ratio(medians["catch_up"], medians["raw_reader"]),
        "buffer_vs_catch_up_ratio": ratio(medians["buffer_tail"], medians["catch_up"]),
    }
