"""The verify suite: ``streamwal verify`` on a long channel against a raw reader.

``messages`` inserts of ``payload_bytes`` are written once, in the WAL's format, by a
raw batching producer (:func:`write_wal_log`: a first time tick, then inserts that
confirm it, time ticks increasing: a valid log, written far faster than through a
WAL). Then, ``repeats`` times, interleaved over the same channel:

- ``raw_reader``: the simplest ``pulsar.Client`` reader loop over every message (no
  decoding), in this process;
- ``verify``: ``streamwal verify --json`` in a child process, timed from its start to
  its exit, its peak RSS (with its reading process's) polled from ``/proc``, the disk
  its store took from its report.

Reported: messages/s of each, their ratio (bound: verify >= 0.5 x raw), verify's
peak RSS (bound: 256 MB) and disk. The topic is deleted at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pulsar

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId
from streamwal.adaptors.pulsar.admin import PulsarAdmin, admin_url_for
from streamwal.adaptors.pulsar.opener import client_logger
from streamwal.wal.message import MessageType, MutableMessage, encode
from streamwal.wal.message.codec import KEY_TIME_TICK, encode_stamped
from streamwal_lab.bench.stats import ratio
from streamwal_lab.bench.target import BenchTarget

__all__ = [
    "MAX_RSS_MB",
    "MIN_RATIO",
    "VerifyRun",
    "read_raw",
    "run_verify",
    "run_verify_bench",
    "write_wal_log",
]

MAX_RSS_MB = 256
MIN_RATIO = 0.5
_NODE = 1


def write_wal_log(
    pulsar_url: str, topic: str, messages: int, payload_bytes: int = 256, node: int = _NODE
) -> int:
    """A first time tick, then ``messages`` unique inserts of ``payload_bytes`` that
    confirm it, with increasing time ticks, through one raw batching producer; the
    entries written (``messages + 1``). A second call on the topic is a new ownership
    of the same node, above the first."""
    client = pulsar.Client(pulsar_url, logger=client_logger())
    try:
        # the WAL's cursor holds the backlog, as a WAL's channel has it: without a
        # subscription the broker may drop a closed ledger of a topic without retention
        client.subscribe(
            topic,
            PulsarConfig().cursor_subscription,
            initial_position=pulsar.InitialPosition.Earliest,
        ).close()
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=1000,
            batching_max_publish_delay_ms=5,
            max_pending_messages=20_000,
            block_if_queue_full=True,
        )
        base = time.time_ns() // 1_000_000 << 18
        body, props = encode(MutableMessage(MessageType.TIME_TICK).stamped(base, None, node))
        first = PulsarMessageId.from_pulsar(producer.send(body, props))
        filler = b"v" * max(0, payload_bytes - 12)
        _, template = encode_stamped(MutableMessage(MessageType.INSERT, filler), base, first, node)
        failed: list[str] = []

        def sent(result: Any, _: Any) -> None:
            if result != pulsar.Result.Ok:
                failed.append(str(result))

        for i in range(messages):
            props = dict(template)
            props[KEY_TIME_TICK] = str(base + 1 + i)
            producer.send_async(b"%012d" % i + filler, sent, properties=props)
        producer.flush()
        producer.close()
        if failed:
            raise RuntimeError(f"{len(failed)} sends failed, first: {failed[0]}")
        return messages + 1
    finally:
        client.close()


def read_raw(pulsar_url: str, topic: str) -> int:
    """Every message of ``topic``, read by the simplest reader loop: the baseline."""
    client = pulsar.Client(pulsar_url, logger=client_logger())
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        read = 0
        while reader.has_message_available():
            reader.read_next()
            read += 1
        reader.close()
        return read
    finally:
        client.close()


@dataclass(frozen=True)
class VerifyRun:
    """One ``streamwal verify`` child: exit code, report, wall time, peak RSS."""

    code: int
    report: dict[str, Any]
    seconds: float
    max_rss_mb: float
    stderr: str


def run_verify(pulsar_url: str, channel: str, *extra: str) -> VerifyRun:
    """``streamwal verify --json`` on ``channel`` in a child process; its peak RSS is
    the child's own high-water mark (``VmHWM``, read while it runs) plus that of the
    process it reads the log with (:func:`_watch_hwm`): ``wait4``'s
    ``ru_maxrss`` of a forked child starts at its parent's peak on Linux (kept across
    ``exec``), so from a large parent such as a test run it would report the parent."""
    command = [
        sys.executable,
        "-m",
        "streamwal.cli",
        "verify",
        "--channel",
        channel,
        "--pulsar",
        pulsar_url,
        "--json",
        "--no-progress",
        *extra,
    ]
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak_kb = [0]
    done = threading.Event()
    watcher = threading.Thread(target=_watch_hwm, args=(child.pid, done, peak_kb))
    watcher.start()
    try:
        out, err = _drain(child)
    finally:
        done.set()
        watcher.join()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    report = json.loads(out) if out.strip() else {}
    peak_mb = (peak_kb[0] or usage.ru_maxrss) / 1024
    return VerifyRun(child.returncode, report, seconds, peak_mb, err.decode())


def _watch_hwm(pid: int, done: threading.Event, peak_kb: list[int]) -> None:
    """The peak memory (kB) of the child and of the process it reads with: its
    ``VmHWM`` plus each of its own children's, polled until it exits or ``done`` is
    set. A forked reader shares pages with the child, so the sum counts them twice:
    an upper bound."""
    children: dict[int, int] = {}
    while not done.is_set():
        own = _hwm(pid)
        if own is None:
            return
        for child in _children(pid):
            seen = _hwm(child)
            if seen is not None:
                children[child] = max(children.get(child, 0), seen)
        peak_kb[0] = max(peak_kb[0], own + sum(children.values()))
        done.wait(0.02)


def _hwm(pid: int) -> int | None:
    """A process's ``VmHWM`` in kB; ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as text:
            return [int(p) for p in text.read().split()]
    except (OSError, ValueError):
        return []


def _drain(child: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Both pipes read to their end without reaping the child (``wait4`` does)."""
    assert child.stdout is not None and child.stderr is not None
    stderr = child.stderr
    err_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: err_chunks.append(stderr.read()))
    reader.start()
    out = child.stdout.read()
    reader.join()
    return out, b"".join(err_chunks)


async def run_verify_bench(
    target: BenchTarget,
    *,
    messages: int = 1_000_000,
    payload_bytes: int = 256,
    repeats: int = 2,
) -> dict[str, Any]:
    """Write one channel, then read it raw and verify it, interleaved; see the module."""
    channel = f"bench-verify-{uuid.uuid4().hex[:8]}"
    topic = PulsarConfig(service_url=target.pulsar_url).topic(channel)
    admin_url = target.pulsar_admin_url or admin_url_for(target.pulsar_url)
    admin_args = ("--admin", admin_url) if admin_url else ()
    try:
        started = time.perf_counter()
        entries = await asyncio.to_thread(
            write_wal_log, target.pulsar_url, topic, messages, payload_bytes
        )
        write_s = time.perf_counter() - started
        target.progress(f"verify: {entries} entries written in {write_s:.1f} s")
        raw_rates: list[float] = []
        verify_rates: list[float] = []
        runs: list[VerifyRun] = []
        for _ in range(repeats):
            began = time.perf_counter()
            read = await asyncio.to_thread(read_raw, target.pulsar_url, topic)
            raw_rates.append(read / (time.perf_counter() - began))
            run = await asyncio.to_thread(run_verify, target.pulsar_url, channel, *admin_args)
            if run.code != 0 or run.report.get("messages") != entries:
                raise RuntimeError(
                    f"verify exited {run.code} after {run.report.get('messages')} of "
                    f"{entries} entries: {run.stderr[-500:]}"
                )
            runs.append(run)
            verify_rates.append(entries / run.seconds)
            target.progress(
                f"verify: raw {raw_rates[-1]:.0f}/s, verify {verify_rates[-1]:.0f}/s, "
                f"peak RSS {run.max_rss_mb:.0f} MB"
            )
    finally:
        if admin_url is not None:
            await PulsarAdmin(admin_url).delete(f"{PulsarAdmin.topic_path(topic)}?force=true")
    raw_per_s = round(statistics.median(raw_rates), 1)
    verify_per_s = round(statistics.median(verify_rates), 1)
    peak = max(r.max_rss_mb for r in runs)
    work = max(int(r.report.get("work_bytes", 0)) for r in runs)
    result = {
        "messages": messages,
        "entries": entries,
        "payload_bytes": payload_bytes,
        "repeats": repeats,
        "write_per_s": round(entries / write_s, 1),
        "per_s": {"raw_reader": raw_per_s, "verify": verify_per_s},
        "verify_vs_raw_ratio": ratio(verify_per_s, raw_per_s),
        "verify_vs_raw_bound": MIN_RATIO,
        "verify_peak_rss_mb": round(peak, 1),
        "verify_peak_rss_bound_mb": MAX_RSS_MB,
        "verify_work_mb": round(work / 1e6, 1),
        "runs": {
            "raw_reader": raw_rates,
            "verify": verify_rates,
            "verify_rss_mb": [r.max_rss_mb for r in runs],
        },
    }
    target.progress(
        f"verify: raw {raw_per_s:.0f}/s, verify {verify_per_s:.0f}/s "
        f"(ratio {result['verify_vs_raw_ratio']}), peak RSS {peak:.0f} MB, "
        f"store {work / 1e6:.0f} MB"
    )
    return result
