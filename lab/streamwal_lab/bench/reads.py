"""The reads suite: every read path a user meets, each against a raw Pulsar reader.

A node in a child process (:mod:`streamwal_lab.bench.node_process`, tracing on) owns
one channel, filled with ``messages`` inserts through ``ProduceBatch`` (packed, as a
deployed node writes them: an entry holds many messages). Beside it, a raw channel
holds as many messages of the same size, written by the raw producer
(:func:`~streamwal_lab.bench.raw.fill_raw`: Pulsar's batching, as the WAL's producer
had it before packs). Then, ``repeats`` times, interleaved, each from the start of its
channel to its last message (time ticks included, as every path delivers them),
messages/s:

- ``raw_batched``: the raw reader loop (:func:`~streamwal_lab.bench.raw.read_raw`) over
  the raw channel: Pulsar messages, each of the size the WAL's readers read; the
  baseline of the catch-up targets;
- ``raw_reader``: the same loop over the WAL's channel (no decoding): it counts the
  channel's entries, packs of many messages each, so it is no per-message baseline;
  kept, labelled, for what an entry costs;
- ``catch_up``: a scanner of a read-only WAL in this process (from the broker, decoded);
- ``consume``: ``Consume`` through the node (one message per frame);
- ``consume_batch``: ``ConsumeBatch`` through the node (what is ready per frame).

And ``tail``: a raw reader and a ``ConsumeBatch`` reader both start after a marker
entry, then ``messages`` more are appended through the node as fast as it takes them;
each reader's rate is what it read divided by the time from the first append to its
reading the last one, so a reader that keeps up with the writer shows the write rate
and a lagging one less.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable
from typing import Any, Unpack

import pulsar

from streamwal.adaptors.pulsar import PulsarMessageId, PulsarOpener
from streamwal.node.client import NodeClient, policy
from streamwal.wal.backend import DeliveryPolicy
from streamwal.wal.initializing import open_read_only
from streamwal.wal.wal import ReadOnlyWAL
from streamwal_lab.bench.node_process import node_and_client
from streamwal_lab.bench.raw import fill_raw, read_raw
from streamwal_lab.bench.scan import ReadBack, ReadBackOptions
from streamwal_lab.bench.stats import ratio
from streamwal_lab.bench.target import BenchTarget

__all__ = ["PATHS", "run_reads_bench"]

PATHS = ("raw_batched", "raw_reader", "catch_up", "consume", "consume_batch")
_FILL_BATCH = 500
_FILL_CALLERS = 4
#: the last message of a fill: unique, so a raw reader finds it inside a WAL frame too
_END = b"streamwal-bench-reads-end"
_TIMEOUT_S = 300.0


async def _fill(client: NodeClient, channel: str, messages: int, payload: bytes) -> bytes:
    """``messages`` inserts, then one ``end`` marker; the marker's message id."""
    remaining = iter(range(0, messages, _FILL_BATCH))

    async def caller() -> None:
        for start in remaining:
            count = min(_FILL_BATCH, messages - start)
            await client.produce_batch(channel, [payload] * count)

    await asyncio.gather(*(caller() for _ in range(_FILL_CALLERS)))
    (end,) = await client.produce_batch(channel, [_END])
    return end.message_id


async def _raw(client: Any, topic: str, start: Any) -> int:
    """Entries from ``start`` (exclusive, or the earliest) to the ``end`` marker."""
    reader = await client.create_reader(topic, start)
    read = 0
    try:
        while True:
            msg = await reader.read_next()
            read += 1
            if _END in msg.data():  # the entry's payload is a frame that holds it
                return read
    finally:
        await reader.close()


async def _catch_up(wal: ReadOnlyWAL) -> int:
    scanner = await wal.read(DeliveryPolicy.all())
    read = 0
    try:
        async for msg in scanner:
            read += 1
            if msg.payload == _END:
                return read
    finally:
        await scanner.close()
    raise AssertionError("a scanner never ends on its own")


async def _consume(client: NodeClient, channel: str) -> int:
    read = 0
    async for m in client.consume(channel, policy("all"), timeout=_TIMEOUT_S):
        read += 1
        if m.payload == _END:
            return read
    raise AssertionError("the Consume stream ended")


async def _consume_batch(client: NodeClient, channel: str, start: bytes | None = None) -> int:
    delivery = policy("all") if start is None else policy("start_after", message_id=start)
    read = 0
    async for frame in client.consume_batches(channel, delivery, timeout=_TIMEOUT_S):
        for m in frame:
            read += 1
            if m.payload == _END:  # a time tick may follow it in the frame
                return read
    raise AssertionError("the ConsumeBatch stream ended")


async def _timed(read: Awaitable[int]) -> float:
    started = time.perf_counter()
    count = await read
    return count / (time.perf_counter() - started)


async def _tail(
    client: NodeClient,
    raw_client: Any,
    topic: str,
    channel: str,
    messages: int,
    payload: bytes,
) -> dict[str, float]:
    (marker,) = await client.produce_batch(channel, [b"marker"])
    raw_start = PulsarMessageId.from_bytes(marker.message_id).to_pulsar()
    done: dict[str, float] = {}

    async def follow(name: str, read: Awaitable[int]) -> int:
        count = await read
        done[name] = time.perf_counter()
        return count

    readers = {
        "raw_reader": asyncio.ensure_future(
            follow("raw_reader", _raw(raw_client, topic, raw_start))
        ),
        "consume_batch": asyncio.ensure_future(
            follow("consume_batch", _consume_batch(client, channel, marker.message_id))
        ),
    }
    await asyncio.sleep(0.2)  # both readers connected: the appends are read live
    began = time.perf_counter()
    await _fill(client, channel, messages, payload)
    counts = {name: await asyncio.wait_for(task, _TIMEOUT_S) for name, task in readers.items()}
    return {name: counts[name] / (done[name] - began) for name in readers}


async def run_reads_bench(
    target: BenchTarget, **options: Unpack[ReadBackOptions]
) -> dict[str, Any]:
    """Fill one channel through a node, then read it every way; see the module."""
    read_back = ReadBack("reads", **options)
    messages, payload = read_back.messages, b"r" * read_back.payload_bytes
    run, channel = read_back.run, read_back.name()
    config = target.pulsar_config()
    topic = config.topic(channel)
    raw_topic = config.topic(read_back.name("raw"))
    rates: dict[str, list[float]] = {path: [] for path in PATHS}
    tails: dict[str, list[float]] = {"raw_reader": [], "consume_batch": []}
    async with (
        node_and_client(
            target, key_prefix=f"/bench-reads-{run}-node", log_name=f"node-reads-{run}.log"
        ) as (_, client),
        PulsarOpener(config) as opener,
        contextlib.AsyncExitStack() as held,
    ):
        await client.assign(channel)
        held.push_async_callback(client.remove, channel)
        started = time.perf_counter()
        await _fill(client, channel, messages, payload)
        fill_s = time.perf_counter() - started
        target.progress(f"reads: {messages} messages through the node in {fill_s:.1f} s")
        await fill_raw(opener.client, raw_topic, config, messages + 1, payload)
        wal = await open_read_only(opener, channel)
        held.push_async_callback(wal.close)
        earliest = pulsar.MessageId.earliest
        paths = {
            "raw_batched": lambda: read_raw(opener.client, raw_topic, messages + 1),
            "raw_reader": lambda: _raw(opener.client, topic, earliest),
            "catch_up": lambda: _catch_up(wal),
            "consume": lambda: _consume(client, channel),
            "consume_batch": lambda: _consume_batch(client, channel),
        }
        for _ in range(read_back.repeats):
            for path in PATHS:
                rates[path].append(await _timed(paths[path]()))
        for _ in range(read_back.repeats):
            tail = await _tail(client, opener.client, topic, channel, messages, payload)
            for name, rate in tail.items():
                tails[name].append(rate)
    per_s = {path: round(statistics.median(values), 1) for path, values in rates.items()}
    tail_per_s = {name: round(statistics.median(values), 1) for name, values in tails.items()}
    result = {
        **read_back.figures(),
        "fill_per_s": round(messages / fill_s, 1),
        "per_s": per_s,
        "tail_per_s": tail_per_s,
        "catch_up_vs_raw_batched_ratio": ratio(per_s["catch_up"], per_s["raw_batched"]),
        "consume_batch_vs_raw_batched_ratio": ratio(per_s["consume_batch"], per_s["raw_batched"]),
        "consume_vs_raw_batched_ratio": ratio(per_s["consume"], per_s["raw_batched"]),
        # against the raw reader of the WAL's own channel, which counts its entries
        "catch_up_vs_raw_ratio": ratio(per_s["catch_up"], per_s["raw_reader"]),
        "consume_vs_raw_ratio": ratio(per_s["consume"], per_s["raw_reader"]),
        "consume_batch_vs_raw_ratio": ratio(per_s["consume_batch"], per_s["raw_reader"]),
        "consume_batch_vs_catch_up_ratio": ratio(per_s["consume_batch"], per_s["catch_up"]),
        "tail_vs_raw_ratio": ratio(tail_per_s["consume_batch"], tail_per_s["raw_reader"]),
        "runs": {**rates, **{f"tail_{k}": v for k, v in tails.items()}},
    }
    target.progress(
        "reads: "
        + ", ".join(f"{k} {v:.0f}/s" for k, v in per_s.items())
        + f"; tail raw {tail_per_s['raw_reader']:.0f}/s node {tail_per_s['consume_batch']:.0f}/s"
    )
    return result
