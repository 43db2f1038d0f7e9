"""``streamwal verify``: check a channel's log with a plain Pulsar reader, as it reads.

It stays whole past 500 lines because it is one role, reading a channel for the check: the
reader, its start (``--from``/``--since``), the checkpoint and the command are one path.

The log is read one entry at a time (:func:`iter_topic`), in a second process that
also decodes it (:mod:`streamwal.verify.pipeline`), and fed to the streaming
:class:`~streamwal.verify.history.HistoryChecker`: memory stays flat whatever the
channel's length (``docs/verify.md``). ``--from``/``--since`` start later than the
earliest entry; ``--state FILE`` saves a checkpoint (and its digests, in ``FILE.db``)
from which the next run with the same file continues.

Exit codes (the one table, also in ``docs/verify.md``):

==== =============================================================================
0    the log holds no violation
1    it does (the summary names the first offending message ids)
2    the log, the acknowledgements, a checkpoint, an option (``--from``,
     ``--since``, ``--state``) or the node's file (``--config``) could not be read
3    the channel does not exist (checked on the admin API; nothing is created)
==== =============================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import json
import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId
from streamwal.adaptors.pulsar.admin import PulsarAdmin, admin_url_for, require_topic
from streamwal.adaptors.pulsar.retention import TopicRetention
from streamwal.errors import (
    ClosedError,
    DecodeError,
    InvalidInputError,
    NoSuchChannelError,
    StreamwalError,
)
from streamwal.node.cli_options import add_pulsar_options, pulsar_from_args
from streamwal.verify.acks import Ack, Delivery, Failure, TxnRecord, read_acks
from streamwal.verify.history import Facts, HistoryChecker, HistoryReport
from streamwal.verify.pipeline import ReadingProcess, ReadOrder
from streamwal.verify.reading import iter_entries, iter_topic
from streamwal.wal.backend import BackendMessage, validate_channel_name

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_VIOLATIONS",
    "iter_entries",
    "iter_topic",
    "parse_message_id",
    "parse_since",
    "read_delivered",
    "read_topic",
    "register",
    "verify_channel",
]

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT, EXIT_MISSING = 0, 1, 2, 3

_PROGRESS_EVERY_S = 0.25
_STATE_DB = ".db"


def register(sub: Any) -> None:
    verify = sub.add_parser(
        "verify", help="check a channel's log: time ticks, owners, acknowledgements, transactions"
    )
    verify.add_argument("--channel", required=True, help="the pchannel to check")
    verify.add_argument("--acks", type=Path, help="a file of acknowledgements a client recorded")
    verify.add_argument(
        "--delivered",
        type=Path,
        help="a file of the message ids (hex, one a line) a reader of the whole channel "
        "delivered: checks no transaction was delivered uncommitted or in part",
    )
    add_pulsar_options(verify)  # the admin URL: to read the truncation point
    start = verify.add_mutually_exclusive_group()
    start.add_argument(
        "--from",
        dest="start",
        metavar="ID",
        help="start at this message id (ledger:entry[:batch], (l,e,p,b) as pulsar prints "
        "it, or the id's hex)",
    )
    start.add_argument(
        "--since",
        metavar="TIME",
        help="start at the first message published at or after TIME (ISO 8601, UTC "
        "unless it says otherwise, or relative: --since=-10m, -2h, -1d)",
    )
    verify.add_argument(
        "--state",
        type=Path,
        metavar="FILE",
        help="a checkpoint: continue after the run that wrote it (with what crossing "
        "the boundary needs), and save this run's; the digests go to FILE.db",
    )
    verify.add_argument(
        "--work-dir", type=Path, help="where the on-disk digest store goes (default: a temp dir)"
    )
    verify.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress line on stderr (default: when stderr is a terminal)",
    )
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(func=_run)


# ---- options --------------------------------------------------------------------------

_HEX_ID = re.compile(r"^[0-9a-fA-F]{40}$")
_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_message_id(text: str) -> PulsarMessageId:
    """A message id as an operator copies it: ``ledger:entry[:batch]``,
    ``ledger:entry:partition:batch``, pulsar's ``(ledger,entry,partition,batch)``, or
    the hex of its bytes; :class:`InvalidInputError` otherwise."""
    value = text.strip()
    try:
        if _HEX_ID.match(value):
            return PulsarMessageId.from_bytes(bytes.fromhex(value))
        parts = value.strip("()").replace(",", ":").split(":")
        if len(parts) == 4:  # ledger, entry, partition, batch index
            return PulsarMessageId(int(parts[0]), int(parts[1]), int(parts[3]))
        return PulsarMessageId.parse(":".join(parts))
    except (DecodeError, ValueError):
        raise InvalidInputError(f"--from: not a message id: {text!r}") from None


def parse_since(text: str, now: float | None = None) -> int:
    """``--since`` in milliseconds since the epoch; :class:`InvalidInputError` if it is
    neither ISO 8601 nor ``-N[smhd]``."""
    value = text.strip()
    relative = _RELATIVE.match(value)
    if relative:
        seconds = float(relative.group(1)) * _UNITS[relative.group(2)]
        return int(((time.time() if now is None else now) - seconds) * 1000)
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(
            f"--since: not a time: {text!r} (ISO 8601, or -10m, -2h, -1d)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


# ---- reading --------------------------------------------------------------------------


async def read_topic(service_url: str, topic: str, timeout: float = 30.0) -> list[BackendMessage]:
    """Every entry of ``topic`` up to its end, in a list: for a test that looks at a
    short log's entries (the checker never needs one; see :func:`iter_topic`)."""
    return await asyncio.to_thread(lambda: list(iter_topic(service_url, topic, timeout=timeout)))


# ---- progress -------------------------------------------------------------------------


class _Progress:
    """One line on a terminal, rewritten at most four times a second: messages, rate,
    position, and an ETA when the broker said how many entries the topic holds."""

    def __init__(self, out: TextIO, ledgers: list[tuple[int, int]] | None) -> None:
        self._out = out
        self._ledgers = ledgers  # (ledger id, entries), in order
        self._started = self._shown = time.monotonic()
        self._total = sum(n for _, n in ledgers) if ledgers else 0
        self._first_index: int | None = None
        self._width = 0

    def _index(self, message_id: PulsarMessageId) -> int | None:
        if not self._ledgers:
            return None
        index = 0
        for ledger, entries in self._ledgers:
            if ledger == message_id.ledger:
                return index + message_id.entry
            index += entries
        return None

    def update(
        self, messages: int, message_id: PulsarMessageId | None, force: bool = False
    ) -> None:
        now = time.monotonic()
        if not force and now - self._shown < _PROGRESS_EVERY_S:
            return
        self._shown = now
        elapsed = max(now - self._started, 1e-6)
        rate = messages / elapsed
        line = f"verify: {messages:,} messages, {rate:,.0f} msg/s"
        if message_id is not None:
            line += f", at {message_id}"
            index = self._index(message_id)
            if index is not None and self._total:
                if self._first_index is None:
                    self._first_index = index
                done = index - self._first_index + 1
                left = self._total - index - 1
                if done > 0 and left >= 0:
                    share = 100 * (index + 1) / self._total
                    line += f", {share:.0f}%, ETA {left * elapsed / done:,.0f} s"
        self._write(line)

    def _write(self, line: str) -> None:
        pad = max(0, self._width - len(line))
        self._out.write("\r" + line + " " * pad)
        self._out.flush()
        self._width = len(line)

    def clear(self) -> None:
        self._out.write("\r" + " " * self._width + "\r")
        self._out.flush()


async def _ledgers(admin: PulsarAdmin, topic: str) -> list[tuple[int, int]] | None:
    """The topic's ledgers and their entry counts (the open one's from the entry count
    in all), for the ETA; ``None`` if the admin API does not say."""
    try:
        stats = await admin.get(f"{PulsarAdmin.topic_path(topic)}/internalStats")
    except (StreamwalError, OSError):
        return None
    if not isinstance(stats, dict):
        return None
    ledgers = [(int(x["ledgerId"]), int(x.get("entries") or 0)) for x in stats.get("ledgers", [])]
    if ledgers:
        closed = sum(n for _, n in ledgers[:-1])
        last = int(stats.get("numberOfEntries") or 0) - closed
        ledgers[-1] = (ledgers[-1][0], max(last, ledgers[-1][1]))
    return ledgers or None


# ---- the check ------------------------------------------------------------------------


def _load_state(path: Path, topic: str) -> dict[str, Any] | None:
    """The checkpoint at ``path``, if there is one; :class:`InvalidInputError` if it is
    not a checkpoint of ``topic`` or its digests are gone."""
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"--state {path}: not a verify checkpoint: {exc}") from exc
    if not isinstance(state, dict):
        raise InvalidInputError(f"--state {path}: not a verify checkpoint")
    if state.get("topic") != topic:
        raise InvalidInputError(
            f"--state {path}: a checkpoint of {state.get('topic')!r}, not of {topic!r}"
        )
    if not _db_of(path).exists():
        raise InvalidInputError(f"--state {path}: its digests {_db_of(path)} are missing")
    return state


def _db_of(state: Path) -> Path:
    return state.with_name(state.name + _STATE_DB)


def _save_state(path: Path, topic: str, checker: HistoryChecker) -> None:
    """Written beside, then renamed over: a run killed while saving leaves the last one."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps({"topic": topic, **checker.state()}))
    os.replace(partial, path)


async def verify_channel(
    service_url: str,
    channel: str,
    acks_file: Path | None = None,
    *,
    acks: Iterable[Ack] = (),
    failures: Iterable[Failure] = (),
    tenant: str = "public",
    namespace: str = "default",
    admin_url: str | None = None,
    delivered: Iterable[bytes] | None = None,
    batches: Iterable[Sequence[str]] = (),
    txns: Iterable[TxnRecord] = (),
    deliveries: Iterable[Delivery] | None = None,
    must_exist: bool = False,
    start: PulsarMessageId | None = None,
    since_ms: int | None = None,
    state: Path | None = None,
    work_dir: Path | None = None,
    progress: TextIO | None = None,
) -> HistoryReport:
    """Check ``channel``'s log against the acknowledgements of ``acks_file`` and
    ``acks``, and the failed appends ``failures``; ``delivered``: the message ids a
    reader of the whole channel delivered (transaction rules); ``batches``: each batch
    a client sent, as its payloads' digests in order (the ``batch-split`` rule);
    ``txns``: what clients were told of their transactions.

    With an admin API (``admin_url``, or derived from ``service_url``), a truncated
    channel is checked from its truncation point, and with ``must_exist`` a channel
    without a topic raises :class:`NoSuchChannelError` (the reader would create it).
    ``start`` (inclusive) or ``since_ms`` start later; ``state`` is a checkpoint to
    continue from and to save; ``progress`` gets a progress line.
    """
    validate_channel_name(channel)
    config = PulsarConfig(service_url=service_url, tenant=tenant, namespace=namespace)
    topic = config.topic(channel)
    # started first: its start-up overlaps the admin calls below (and it forks before
    # they leave a thread behind); it reads once check() orders it to
    reading = ReadingProcess()
    reading.start()
    checking = False
    try:
        admin = admin_url or admin_url_for(service_url)
        truncated = None
        ledgers = None
        if admin is not None:
            if must_exist:
                await require_topic(PulsarAdmin(admin), topic, channel)
            retention = TopicRetention(
                PulsarAdmin(admin), topic, channel, config.cursor_subscription
            )
            truncated = await retention.truncation_point()
            if progress is not None:
                ledgers = await _ledgers(PulsarAdmin(admin), topic)
        saved = _load_state(state, topic) if state is not None else None
        if saved is not None and (start is not None or since_ms is not None):
            raise InvalidInputError("--from and --since start a new check: not with a checkpoint")
        recorded: Iterable[Ack] = itertools.chain(read_acks(acks_file) if acks_file else (), acks)

        def check() -> HistoryReport:
            with (
                reading,
                HistoryChecker(
                    PulsarMessageId.from_bytes,
                    truncated_before=truncated,
                    store=_db_of(state) if state is not None else None,
                    work_dir=work_dir,
                    starts_inside=start is not None or since_ms is not None,
                ) as checker,
            ):
                if saved is not None:
                    checker.restore(saved)
                after = checker.last_id
                first = start if after is None else after
                order = ReadOrder(
                    service_url,
                    topic,
                    channel,
                    start=first.to_bytes() if first is not None else None,
                    inclusive=after is None and start is not None,
                    since_ms=since_ms,
                )
                _feed(checker, reading.read_batches(order), progress, ledgers, stop)
                report = checker.finish(
                    acks=recorded,
                    failures=failures,
                    batches=batches,
                    txns=txns,
                    deliveries=deliveries,
                    delivered=delivered,
                )
                if state is not None:
                    _save_state(state, topic, checker)
                return report

        if state is not None and saved is None:
            _db_of(state).unlink(missing_ok=True)  # a store without its checkpoint: stale
        stop = threading.Event()
        checking = True  # from here the thread that reads closes the reading process
        try:
            return await asyncio.to_thread(check)
        finally:
            stop.set()  # cancelled (Ctrl-C): the reading thread stops at its next look,
            reading.terminate()  # or at once if it waits for the reading process
    finally:
        if not checking:
            reading.close()


def _feed(
    checker: HistoryChecker,
    batches: Iterable[list[Facts]],
    out: TextIO | None,
    ledgers: list[tuple[int, int]] | None,
    stop: threading.Event,
) -> None:
    """Every entry's facts into ``checker``, a batch of the reading process's at a
    time; after each batch (at most :data:`~streamwal.verify.pipeline.BATCH` entries),
    the progress line (if ``out``) and ``stop`` (set: :class:`ClosedError`, no
    checkpoint saved: the next run redoes this one from the last)."""
    feed: Callable[[list[Facts]], None] = checker.feed_many
    line = _Progress(out, ledgers) if out is not None else None
    count = 0
    try:
        for batch in batches:
            feed(batch)
            count += len(batch)
            if stop.is_set():
                raise ClosedError(f"verify stopped after {count} entries")
            if line is not None and batch:
                line.update(count, PulsarMessageId.from_bytes(batch[-1][0]))
    finally:
        if line is not None:
            line.clear()


def read_delivered(path: Path) -> list[bytes]:
    """Message ids, hex, one a line (blank lines skipped)."""
    with open(path) as lines:
        return [bytes.fromhex(line.strip()) for line in lines if line.strip()]


def _iter_delivered(path: Path) -> Iterator[bytes]:
    """:func:`read_delivered` one id at a time (the file can be as long as the log)."""
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield bytes.fromhex(line.strip())
                except ValueError:
                    raise InvalidInputError(f"{path}:{number}: not a hex message id") from None


def _run(args: argparse.Namespace) -> int:
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    try:
        config = pulsar_from_args(args)
        start = parse_message_id(args.start) if args.start else None
        since_ms = parse_since(args.since) if args.since else None
        report = asyncio.run(
            verify_channel(
                config.service_url,
                args.channel,
                args.acks,
                tenant=config.tenant,
                namespace=config.namespace,
                admin_url=config.admin_url,
                delivered=_iter_delivered(args.delivered) if args.delivered else None,
                must_exist=True,
                start=start,
                since_ms=since_ms,
                state=args.state,
                work_dir=args.work_dir,
                progress=sys.stderr if show else None,
            )
        )
    except NoSuchChannelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_MISSING
    except (StreamwalError, OSError, TimeoutError, ValueError, sqlite3.Error) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    code = EXIT_OK if report.ok else EXIT_VIOLATIONS
    if args.json:
        print(json.dumps({"channel": args.channel, **report.as_dict()}, indent=2))
        return code
    print(f"channel {args.channel}")
    print(report.summary())
    print("OK" if report.ok else "VIOLATIONS FOUND")
    return code
