"""The large-messages suite: MB/s of messages larger than the broker takes in one entry.

A message over the broker's ``maxMessageSize`` (5 MiB on a stock broker) is
written as consecutive chunk records (:mod:`streamwal.wal.chunking`), each sent only
once the one before it is persisted. What that costs is measured against the
raw producer writing the same bytes as ``raw_message_bytes`` messages (1 MiB by
default), all of one large message's pieces sent at once and awaited together: what
an application that splits its data itself would do, with nothing keeping its pieces
together or ordered against other writers.

Three sides, on fresh topics of one run, ``repeats`` times, interleaved (raw, WAL,
node, raw...) so drift on a noisy machine hits all three; the figures are medians:

- ``raw``: :func:`~streamwal_lab.bench.raw.raw_producer`, one large message's bytes as
  ``size / raw_message_bytes`` sends;
- ``wal``: ``WAL.append`` of one message of ``size`` bytes, in this process;
- ``node``: ``Produce`` of the same message through a node in a child process
  (:mod:`streamwal_lab.bench.node_process`).

``concurrency`` callers append back to back, each with one large message in flight.
The suite deletes the topics it wrote (each run writes a few GiB to the bookie).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Unpack

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.node.client import NodeClient
from streamwal.tso import InProcessTSO
from streamwal.wal.initializing import open_wal
from streamwal_lab.bench.append import appending
from streamwal_lab.bench.node_process import node_and_client
from streamwal_lab.bench.raw import raw_client, raw_producer
from streamwal_lab.bench.sides import (
    Append,
    Schedule,
    Timed,
    interleaved,
    side_medians,
    wal_appender,
)
from streamwal_lab.bench.stats import ratio
from streamwal_lab.bench.target import BenchTarget, Timing, new_run
from streamwal_lab.stack.topics import delete_topics

__all__ = [
    "DEFAULT_LARGE_CONCURRENCY",
    "DEFAULT_LARGE_SIZES",
    "DEFAULT_RAW_MESSAGE_BYTES",
    "LARGE_SIDES",
    "in_mb",
    "large_message",
    "raw_pieces",
    "run_large_bench",
    "with_mb",
]

MiB = 1024 * 1024
DEFAULT_LARGE_SIZES = (16 * MiB,)
DEFAULT_LARGE_CONCURRENCY = (1,)
DEFAULT_RAW_MESSAGE_BYTES = MiB
LARGE_SIDES = ("raw", "wal", "node")


async def run_large_bench(
    target: BenchTarget,
    *,
    sizes: Sequence[int] = DEFAULT_LARGE_SIZES,
    concurrency: Sequence[int] = DEFAULT_LARGE_CONCURRENCY,
    raw_message_bytes: int = DEFAULT_RAW_MESSAGE_BYTES,
    **timing: Unpack[Timing],
) -> dict[str, Any]:
    """Every cell of ``sizes`` x ``concurrency``; see the module docstring."""
    run = new_run()
    schedule = Schedule.of(timing)
    config = target.pulsar_config()
    cells: list[dict[str, Any]] = []
    topics: list[str] = []
    client = raw_client(target.pulsar_url)
    try:
        async with (
            node_and_client(
                target,
                key_prefix=f"/bench-large-{run}-node",
                log_name=f"node-large-{run}.log",
                tracing=False,
            ) as (node, node_client),
            target.wal_services(f"/bench-large-{run}-wal", config) as (tso, opener),
        ):
            for size in sizes:
                for conc in concurrency:
                    name = f"{run}-{size}-{conc}"
                    topics += [config.topic(f"bench-large-{side}-{name}") for side in LARGE_SIDES]
                    cell = await _cell(
                        client, node_client, opener, tso, config, name, size, conc,
                        raw_message_bytes, schedule,
                    )  # fmt: skip
                    cells.append(cell)
                    target.progress(
                        f"large {size / MiB:g} MiB x{conc}: raw {cell['raw']['mb_per_s']} MB/s, "
                        f"wal {cell['wal']['mb_per_s']} ({cell['wal_vs_raw_ratio']}), "
                        f"node {cell['node']['mb_per_s']} ({cell['node_vs_raw_ratio']})"
                    )
    finally:
        await client.close()
        if target.pulsar_admin_url is not None:
            await delete_topics(target.pulsar_admin_url, topics)
    return {
        **schedule.figures(),
        "raw_message_bytes": raw_message_bytes,
        "node": {"process": "child", "exit_code": node.exit_code},
        "cells": cells,
    }


def with_mb(figures: dict[str, float], size: int) -> dict[str, float]:
    """A timed run's figures with its MB/s (10^6 bytes: the unit disks and links use)."""
    return {**figures, "mb_per_s": round(figures["per_s"] * size / 1e6, 1)}


def in_mb(timed: Timed, size: int) -> Timed:
    """The side ``timed`` with the MB/s of its ``size``-byte messages (:func:`with_mb`)."""

    async def run(seconds: float) -> dict[str, float]:
        return with_mb(await timed(seconds), size)

    return run


def large_message(size: int) -> bytes:
    """``size`` bytes of a repeating pattern, for the raw, WAL and node sides alike."""
    return bytes(range(256)) * (size // 256) + b"\x00" * (size % 256)


def raw_pieces(producer: Any, payload: bytes, piece_bytes: int) -> tuple[Append, int]:
    """The raw side's append of one large message: its bytes as ``piece_bytes`` messages,
    sent at once and awaited together; and how many pieces a message makes."""
    pieces = [payload[i : i + piece_bytes] for i in range(0, len(payload), piece_bytes)]

    async def append(_: bytes) -> object:
        return await asyncio.gather(*(producer.send(p) for p in pieces))

    return append, len(pieces)


async def _cell(
    client: Any,
    node_client: NodeClient,
    opener: PulsarOpener,
    tso: InProcessTSO,
    config: PulsarConfig,
    name: str,
    size: int,
    conc: int,
    raw_message_bytes: int,
    schedule: Schedule,
) -> dict[str, Any]:
    payload = large_message(size)
    producer = await raw_producer(client, config.topic(f"bench-large-raw-{name}"), config)
    raw_append, pieces = raw_pieces(producer, payload, raw_message_bytes)
    wal = await open_wal(opener, f"bench-large-wal-{name}", tso.allocator(), node_id=1)
    channel = f"bench-large-node-{name}"
    await node_client.assign(channel)
    try:

        async def node_append(data: bytes) -> object:
            return await node_client.produce(channel, data)

        appends: dict[str, Append] = {
            "raw": raw_append,
            "wal": wal_appender(wal),
            "node": node_append,
        }
        sides = {side: in_mb(appending(appends[side], payload, conc), size) for side in LARGE_SIDES}
        runs = await interleaved(sides, schedule)
    finally:
        await wal.close()
        await producer.close()
    medians = side_medians(runs)
    return {
        "message_bytes": size,
        "concurrency": conc,
        "raw_messages_per_message": pieces,
        **medians,
        "wal_vs_raw_ratio": ratio(medians["wal"]["mb_per_s"], medians["raw"]["mb_per_s"]),
        "node_vs_raw_ratio": ratio(medians["node"]["mb_per_s"], medians["raw"]["mb_per_s"]),
        "node_vs_wal_ratio": ratio(medians["node"]["mb_per_s"], medians["wal"]["mb_per_s"]),
        "runs": runs,
    }
