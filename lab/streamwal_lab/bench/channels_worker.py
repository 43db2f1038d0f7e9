"""One node process holding N channels (WALs or raw producers): what they cost.

Run by :mod:`streamwal_lab.bench.channels` as ``python -m node.bench.channels_worker SPEC``
(``SPEC`` a JSON object), one process per (mode, N), so the resident memory it
reports is this node's alone; it prints one JSON object on stdout.

Steps: start the client (and the TSO), open and close one warm-up channel, take the
RSS; open N channels; take the RSS again (the difference over N is the memory per
open, idle channel). WAL mode then appends one message to every channel, lets the
channels sit idle for ``idle_s`` (process CPU time over that window), and reads every
topic back to count the time ticks persisted inside the window. Last, ``appenders``
tasks spread round-robin over the channels append for ``seconds``.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pulsar

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.adaptors.pulsar.scanner import to_backend_message
from streamwal.errors import DecodeError
from streamwal.tso import EtcdConfig, InProcessTSO, TsoConfig
from streamwal.tso.timestamp import split
from streamwal.wal.config import WALConfig
from streamwal.wal.initializing import open_wal
from streamwal.wal.message import MessageType, MutableMessage, decode_entry
from streamwal.wal.wal import WAL
from streamwal_lab.bench.append import timed_appends
from streamwal_lab.bench.raw import raw_client, raw_producer
from streamwal_lab.bench.target import CLIENT_LOG
from streamwal_lab.stack.tso_keys import deleted_afterwards

__all__ = ["bounded", "rss_bytes", "run_worker"]

_OPEN_PARALLELISM = 16


def rss_bytes() -> int:
    """Resident memory of this process (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


async def _settled_rss() -> int:
    gc.collect()
    await asyncio.sleep(0.3)
    return rss_bytes()


async def bounded(calls: Sequence[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Every call, at most a few at a time (opening many channels at once)."""
    gate = asyncio.Semaphore(_OPEN_PARALLELISM)

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await call()

    return await asyncio.gather(*(one(c) for c in calls))


async def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure one (mode, channels) point; see the module docstring."""
    if spec["mode"] == "wal":
        return await _wal_worker(spec)
    return await _raw_worker(spec)


async def _throughput(
    appends: list[Callable[[bytes], Awaitable[object]]], spec: dict[str, Any]
) -> dict[str, float]:
    """``spec['appenders']`` tasks, task i appending to channel i mod N."""
    counter = iter(range(1 << 62))

    async def append(data: bytes) -> object:  # each call goes to the next channel in turn
        return await appends[next(counter) % len(appends)](data)

    payload = b"x" * int(spec["payload_bytes"])
    await timed_appends(append, payload, int(spec["appenders"]), 0.3)
    return await timed_appends(append, payload, int(spec["appenders"]), float(spec["seconds"]))


async def _wal_worker(spec: dict[str, Any]) -> dict[str, Any]:
    count = int(spec["channels"])
    run = uuid.uuid4().hex[:8]
    config = PulsarConfig(service_url=spec["pulsar_url"], client_log_file=CLIENT_LOG)
    wal_config = WALConfig()
    tso_config = TsoConfig(etcd=EtcdConfig((spec["etcd_endpoint"],)), key_prefix=f"/bench-ch-{run}")
    async with (
        deleted_afterwards(spec["etcd_endpoint"], [tso_config.key_prefix]),
        InProcessTSO(tso_config) as tso,
        PulsarOpener(config) as opener,
    ):
        allocator = tso.allocator()
        warm = await open_wal(opener, f"bench-ch-{run}-warm", allocator, 1)
        await warm.append(MutableMessage(MessageType.INSERT, b"warm"))
        await warm.close()
        rss_before = await _settled_rss()
        started = time.perf_counter()
        names = [f"bench-ch-{run}-{i}" for i in range(count)]
        wals: list[WAL] = await bounded(
            [functools.partial(open_wal, opener, n, allocator, 1, wal_config) for n in names]
        )
        open_s = time.perf_counter() - started
        rss_open = await _settled_rss()
        try:
            idle = await _idle_window(wals, names, spec, config, opener, wal_config)
            appends = [_wal_append(w) for w in wals]
            load = await _throughput(appends, spec)
            rss_load = rss_bytes()
        finally:
            await asyncio.gather(*(w.close() for w in wals), return_exceptions=True)
    return _result(spec, open_s, rss_before, rss_open, rss_load, load, idle)


def _wal_append(wal: WAL) -> Callable[[bytes], Awaitable[object]]:
    async def append(data: bytes) -> object:
        return await wal.append(MutableMessage(MessageType.INSERT, data))

    return append


async def _idle_window(
    wals: list[WAL],
    names: list[str],
    spec: dict[str, Any],
    config: PulsarConfig,
    opener: PulsarOpener,
    wal_config: WALConfig,
) -> dict[str, Any]:
    """One append per channel, then idle: CPU over the window, ticks persisted in it."""
    await asyncio.gather(*(w.append(MutableMessage(MessageType.INSERT, b"d")) for w in wals))
    await asyncio.sleep(wal_config.time_tick_interval * 3)  # the tick after the data lands
    idle_s = float(spec["idle_s"])
    window_start_ms = time.time() * 1000
    cpu_start = time.process_time()
    await asyncio.sleep(idle_s)
    cpu_s = time.process_time() - cpu_start
    window_end_ms = time.time() * 1000
    per_channel: list[int] = []
    after_data: list[int] = []
    for name in names:
        in_window, ticks_after_data = await _count_ticks(
            opener.client, config.topic(name), window_start_ms, window_end_ms
        )
        per_channel.append(in_window)
        after_data.append(ticks_after_data)
    intervals = idle_s / wal_config.time_tick_interval
    return {
        "idle_s": idle_s,
        "time_tick_interval_s": wal_config.time_tick_interval,
        "intervals": round(intervals, 1),
        "persisted_ticks_in_window_max": max(per_channel),
        "persisted_ticks_in_window_total": sum(per_channel),
        "persisted_ticks_per_channel_per_interval": round(max(per_channel) / intervals, 4),
        "persisted_ticks_after_last_append_max": max(after_data),
        "idle_cpu_percent": round(cpu_s / idle_s * 100, 2),
    }


async def _count_ticks(client: Any, topic: str, start_ms: float, end_ms: float) -> tuple[int, int]:
    """Persisted time ticks whose physical time is in the window, and after the last data."""
    reader = await client.create_reader(topic, pulsar.MessageId.earliest)
    in_window = after_data = 0
    try:
        while await reader.has_message_available():
            raw = to_backend_message(await reader.read_next())
            try:
                msg = decode_entry(raw, PulsarMessageId.from_bytes)[-1]
            except DecodeError:
                continue
            if msg.type is not MessageType.TIME_TICK:
                after_data = 0
                continue
            after_data += 1
            if start_ms <= split(msg.time_tick)[0] <= end_ms:
                in_window += 1
    finally:
        await reader.close()
    return in_window, after_data


async def _raw_worker(spec: dict[str, Any]) -> dict[str, Any]:
    count = int(spec["channels"])
    run = uuid.uuid4().hex[:8]
    config = PulsarConfig(service_url=spec["pulsar_url"], client_log_file=CLIENT_LOG)
    client = raw_client(spec["pulsar_url"])

    async def create(topic: str) -> Any:
        producer = await raw_producer(client, topic, config)
        await producer.send(b"first")
        return producer

    try:
        warm = await create(config.topic(f"bench-chraw-{run}-warm"))
        await warm.close()
        rss_before = await _settled_rss()
        started = time.perf_counter()
        topics = [config.topic(f"bench-chraw-{run}-{i}") for i in range(count)]
        producers = await bounded([functools.partial(create, t) for t in topics])
        open_s = time.perf_counter() - started
        rss_open = await _settled_rss()
        cpu_start = time.process_time()
        await asyncio.sleep(float(spec["idle_s"]))
        idle_cpu = (time.process_time() - cpu_start) / float(spec["idle_s"])
        idle = {"idle_s": float(spec["idle_s"]), "idle_cpu_percent": round(idle_cpu * 100, 2)}
        load = await _throughput([p.send for p in producers], spec)
        rss_load = rss_bytes()
        await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)
    finally:
        await client.close()
    return _result(spec, open_s, rss_before, rss_open, rss_load, load, idle)


def _result(
    spec: dict[str, Any],
    open_s: float,
    rss_before: int,
    rss_open: int,
    rss_load: int,
    load: dict[str, float],
    idle: dict[str, Any],
) -> dict[str, Any]:
    count = int(spec["channels"])
    mib = 1024 * 1024
    return {
        "mode": spec["mode"],
        "channels": count,
        "appenders": int(spec["appenders"]),
        "open_all_s": round(open_s, 3),
        "rss_before_mib": round(rss_before / mib, 1),
        "rss_open_mib": round(rss_open / mib, 1),
        "rss_after_load_mib": round(rss_load / mib, 1),
        "rss_per_channel_mib": round((rss_open - rss_before) / count / mib, 3),
        "throughput": load,
        "idle": idle,
    }


def main(argv: list[str]) -> None:
    """Print the figures, then leave at once: the figures are all this process is for.

    ``os._exit`` skips interpreter teardown, where the C++ client's threads can abort
    the process (``terminate called without an active exception``) after the work
    is done.
    """
    spec = json.loads(argv[1])
    print(json.dumps(asyncio.run(run_worker(spec))), flush=True)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
