"""The verify suite: ``streamwal verify`` on a long channel against a raw reader.

Two channels of ``messages`` inserts of ``payload_bytes`` each are written once:

- **packed**, as a deployed WAL writes it (:func:`write_packed_log`): a WAL's
  ``append_many`` in batches of :data:`PACK_BATCH` from a few callers, so an entry is a
  pack of many messages (log format v2, ``wal.pack_appends`` on);
- **unpacked**, one message per entry (:func:`write_wal_log`, a raw batching producer
  in the WAL's format: a first time tick, then inserts that confirm it, time ticks
  increasing: a valid log, as a WAL without packs wrote it).

Then, ``repeats`` times, interleaved over both channels:

- ``raw_reader``: the simplest ``pulsar.Client`` reader loop over every Pulsar message
  of the channel (no decoding), in this process. Its messages are the topic's
  **entries**: a pack of many WAL messages is one Pulsar message to it;
- ``verify``: ``streamwal verify --json`` in a child process, timed from its start to
  its exit, its peak RSS (with its reading process's) polled from ``/proc``, the disk
  its store took from its report. Its messages are the WAL's messages (its report's
  count: every message of every pack).

Reported, per channel: messages/s of each as each counts them, their ratio (bound,
on the packed channel: verify >= 0.5 x raw), and the ratio of the time each takes
over the same channel (``entries_ratio``: entries/s against entries/s; on the
unpacked channel the same as the first), verify's peak RSS (bound: 256 MB) and disk.
The topics are deleted at the end.
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
from dataclasses import dataclass
from typing import Any

import pulsar

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin, admin_url_for
from streamwal.adaptors.pulsar.opener import client_logger
from streamwal.tso import InProcessTSO
from streamwal.wal.initializing import open_wal
from streamwal.wal.message import MessageType, MutableMessage, encode
from streamwal.wal.message.codec import encode_stamped
from streamwal_lab.bench.stats import ratio
from streamwal_lab.bench.target import BenchTarget, new_run
from streamwal_lab.stack.tso_keys import deleted_afterwards

__all__ = [
    "MAX_RSS_MB",
    "MIN_RATIO",
    "PACK_BATCH",
    "VerifyRun",
    "read_raw",
    "run_verify",
    "run_verify_bench",
    "write_packed_log",
    "write_wal_log",
]

MAX_RSS_MB = 256
MIN_RATIO = 0.5
#: messages per ``append_many`` of the packed channel, from :data:`_PACK_CALLERS` at once
PACK_BATCH = 256
_PACK_CALLERS = 4
_NODE = 1


async def write_packed_log(
    target: BenchTarget, channel: str, messages: int, payload_bytes: int = 256
) -> None:
    """``messages`` unique inserts of ``payload_bytes`` into ``channel`` through a WAL
    (its own first time tick, packs of the batches, its time ticks): a channel as a
    deployed WAL writes it."""
    tso_config = target.tso_config(f"/bench-verify-{new_run()}")
    filler = b"v" * max(0, payload_bytes - 12)
    starts = iter(range(0, messages, PACK_BATCH))
    async with (
        deleted_afterwards(target.etcd_endpoint, [tso_config.key_prefix]),
        InProcessTSO(tso_config) as tso,
        PulsarOpener(target.pulsar_config()) as opener,
    ):
        wal = await open_wal(opener, channel, tso.allocator(), _NODE)
        try:

            async def caller() -> None:
                for start in starts:
                    count = min(PACK_BATCH, messages - start)
                    await wal.append_many(
                        [
                            MutableMessage(MessageType.INSERT, b"%012d" % (start + i) + filler)
                            for i in range(count)
                        ]
                    )

            await asyncio.gather(*(caller() for _ in range(_PACK_CALLERS)))
        finally:
            await wal.close()


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
        failed: list[str] = []

        def sent(result: Any, _: Any) -> None:
            if result != pulsar.Result.Ok:
                failed.append(str(result))

        for i in range(messages):  # log format v2, as an owner writes it
            msg = MutableMessage(MessageType.INSERT, b"%012d" % i + filler)
            body, props = encode_stamped(msg, base + 1 + i, first, node)
            producer.send_async(body, sent, properties=props)
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


@dataclass
class _Side:
    """One channel's figures over the repeats."""

    channel: str
    topic: str
    raw_rates: list[float]
    verify_rates: list[float]
    entries_rates: list[float]
    runs: list[VerifyRun]
    entries: int = 0
    messages: int = 0

    def measure(self, pulsar_url: str, admin_args: tuple[str, ...], expected: int) -> None:
        """One raw read, then one verify, of this channel; ``expected``: the fewest
        messages verify must report."""
        began = time.perf_counter()
        self.entries = read_raw(pulsar_url, self.topic)
        raw_s = time.perf_counter() - began
        self.raw_rates.append(self.entries / raw_s)
        run = run_verify(pulsar_url, self.channel, *admin_args)
        read = int(run.report.get("messages", 0))
        if run.code != 0 or read < expected:
            raise RuntimeError(
                f"verify of {self.channel} exited {run.code} after {read} messages "
                f"(at least {expected} expected): {run.stderr[-500:]}"
            )
        self.messages = read
        self.runs.append(run)
        self.verify_rates.append(read / run.seconds)
        self.entries_rates.append(self.entries / run.seconds)

    def figures(self) -> dict[str, Any]:
        raw_per_s = round(statistics.median(self.raw_rates), 1)
        verify_per_s = round(statistics.median(self.verify_rates), 1)
        entries_per_s = round(statistics.median(self.entries_rates), 1)
        return {
            "entries": self.entries,
            "messages_verified": self.messages,
            "per_s": {"raw_reader": raw_per_s, "verify": verify_per_s},
            "verify_entries_per_s": entries_per_s,
            "verify_vs_raw_ratio": ratio(verify_per_s, raw_per_s),
            "entries_ratio": ratio(entries_per_s, raw_per_s),
            "verify_peak_rss_mb": round(max(r.max_rss_mb for r in self.runs), 1),
            "verify_work_mb": round(
                max(int(r.report.get("work_bytes", 0)) for r in self.runs) / 1e6, 1
            ),
            "runs": {
                "raw_reader": self.raw_rates,
                "verify": self.verify_rates,
                "verify_rss_mb": [r.max_rss_mb for r in self.runs],
            },
        }


async def run_verify_bench(
    target: BenchTarget,
    *,
    messages: int = 1_000_000,
    payload_bytes: int = 256,
    repeats: int = 2,
    unpacked: bool = True,
) -> dict[str, Any]:
    """Write the channels, then read each raw and verify it, interleaved; see the
    module. ``unpacked``: the one-message-per-entry channel too."""
    run = new_run()
    config = PulsarConfig(service_url=target.pulsar_url)
    admin_url = target.pulsar_admin_url or admin_url_for(target.pulsar_url)
    admin_args = ("--admin", admin_url) if admin_url else ()
    names = {"packed": f"bench-verify-{run}-packed"}
    if unpacked:
        names["unpacked"] = f"bench-verify-{run}-unpacked"
    sides = {kind: _Side(name, config.topic(name), [], [], [], []) for kind, name in names.items()}
    write_s: dict[str, float] = {}
    try:
        started = time.perf_counter()
        await write_packed_log(target, names["packed"], messages, payload_bytes)
        write_s["packed"] = time.perf_counter() - started
        if unpacked:
            started = time.perf_counter()
            await asyncio.to_thread(
                write_wal_log, target.pulsar_url, sides["unpacked"].topic, messages, payload_bytes
            )
            write_s["unpacked"] = time.perf_counter() - started
        target.progress(
            "verify: " + ", ".join(f"{k} channel written in {v:.1f} s" for k, v in write_s.items())
        )
        for _ in range(repeats):
            for kind, side in sides.items():
                await asyncio.to_thread(side.measure, target.pulsar_url, admin_args, messages + 1)
                target.progress(
                    f"verify, {kind}: raw {side.raw_rates[-1]:.0f} entries/s, verify "
                    f"{side.verify_rates[-1]:.0f} messages/s ({side.entries_rates[-1]:.0f} "
                    f"entries/s), peak RSS {side.runs[-1].max_rss_mb:.0f} MB"
                )
    finally:
        if admin_url is not None:
            admin = PulsarAdmin(admin_url)
            for side in sides.values():
                await admin.delete(f"{PulsarAdmin.topic_path(side.topic)}?force=true")
    packed = sides["packed"].figures()
    result: dict[str, Any] = {
        "messages": messages,
        "payload_bytes": payload_bytes,
        "repeats": repeats,
        "pack_batch": PACK_BATCH,
        "raw_reader_counts": "Pulsar messages: the topic's entries (a pack is one)",
        "write_per_s": round(messages / write_s["packed"], 1),
        **packed,
        "verify_vs_raw_bound": MIN_RATIO,
        "verify_peak_rss_bound_mb": MAX_RSS_MB,
    }
    if unpacked:
        result["unpacked"] = {
            **sides["unpacked"].figures(),
            "write_per_s": round(messages / write_s["unpacked"], 1),
        }
        result["verify_peak_rss_mb"] = max(
            result["verify_peak_rss_mb"], result["unpacked"]["verify_peak_rss_mb"]
        )
    target.progress(
        "verify: "
        + "; ".join(
            f"{kind}: raw {f['per_s']['raw_reader']:.0f} entries/s, verify "
            f"{f['per_s']['verify']:.0f} messages/s (ratio {f['verify_vs_raw_ratio']}, "
            f"entries {f['entries_ratio']}), store {f['verify_work_mb']:.0f} MB"
            for kind, f in (("packed", packed), ("unpacked", result.get("unpacked")))
            if f is not None
        )
        + f"; peak RSS {result['verify_peak_rss_mb']:.0f} MB"
    )
    return result
