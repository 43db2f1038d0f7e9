"""Reading and decoding a channel in a second process, beside the rules.

Checking an entry costs the reading (the client's call, the entry's id, payload and
properties), the decoding and the rules, each a few microseconds of one core's
Python. In one process they run one after the other; here a child process reads the
topic, rebuilds chunked messages and decodes each entry into its
:data:`~streamwal.verify.facts.Facts` (what the rules read, builtins only), while
the caller's process applies the rules to the batch before: the two run on two cores
side by side, and verify reads at the pace of the slower half.

The child sends batches of up to :data:`BATCH` entries' facts, each one ``marshal``
blob on a pipe (behind a one-byte tag): ids, digests and small numbers, and an entry
of at most :data:`RAW_MAX` bytes as it was read, which the caller decodes (on a
channel of one small message per entry the read alone is the child's half of the
work), so a batch is a few MB at most whatever the messages' size. A full pipe
blocks the child: at most the pipe's buffer and one batch on each side are in
flight, whatever the channel's length. The last blob is the end, or the error that
stopped the read, raised again in the caller (:class:`~streamwal.errors.StreamwalError`
or ``TimeoutError`` as :func:`~streamwal.verify.reading.iter_topic` raises them).

The child is forked when the calling process has a single thread (the command: no
lock can be held by a thread that the child does not have, and it starts at once,
sharing the parent's imports); otherwise (a test run, a chaos runner with live
clients) it is spawned, a fresh interpreter. It ignores Ctrl-C: the caller stops it
(:meth:`ReadingProcess.close`), and it exits by itself when the caller is gone (its
pipe breaks).
"""

from __future__ import annotations

import contextlib
import marshal
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.errors import UnavailableError
from streamwal.verify.history import Facts, entry_facts, parts_facts
from streamwal.verify.reading import iter_entries, iter_topic
from streamwal.wal.backend import BackendMessage
from streamwal.wal.chunking import KEY_CHUNK_ID, ChunkAssembler, reassemble
from streamwal.wal.message.frame import FORMAT_PROPERTY, is_chunk

__all__ = ["BATCH", "RAW_MAX", "ReadOrder", "ReadingProcess", "ReadingThread"]

BATCH = 1000
"""Entries per blob: large enough that a blob's cost is nothing per entry."""

_FACTS, _MIXED, _END, _ERROR = b"F", b"M", b"E", b"X"
#: an entry this small is sent as it was read, for the caller's process to decode
RAW_MAX = 2048
_PIPE_BYTES = 1 << 20  # the pipe's buffer, if the system allows it (Linux: F_SETPIPE_SZ)
_F_SETPIPE_SZ = 1031
_STOP_S = 5.0


@dataclass(frozen=True)
class ReadOrder:
    """What the child reads: :func:`~streamwal.verify.reading.iter_topic`'s arguments."""

    service_url: str
    topic: str
    channel: str
    start: bytes | None = None  # a PulsarMessageId's bytes
    inclusive: bool = False
    since_ms: int | None = None


class ReadingProcess:
    """The child that reads and decodes: :meth:`start` it early (it takes its order
    later, so that its start-up overlaps the caller's), :meth:`read` once, then
    :meth:`close` (idempotent; also a context manager). No I/O in ``__init__``."""

    def __init__(self) -> None:
        self._process: Any = None
        self._orders: Connection | None = None
        self._facts: Connection | None = None

    def __enter__(self) -> ReadingProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        orders_in, orders_out = os.pipe()
        facts_in, facts_out = os.pipe()
        with contextlib.suppress(OSError, ImportError):
            import fcntl

            fcntl.fcntl(facts_out, _F_SETPIPE_SZ, _PIPE_BYTES)
        try:
            if _single_threaded():
                context: Any = multiprocessing.get_context("fork")
                process = context.Process(
                    target=_spawned,
                    args=(orders_in, facts_out),
                    name="streamwal-verify-reader",
                    daemon=True,
                )
                process.start()
                self._process = process
            else:
                self._process = _Spawned(
                    subprocess.Popen(
                        [sys.executable, "-c", _SPAWN, str(orders_in), str(facts_out)],
                        pass_fds=(orders_in, facts_out),
                        stdin=subprocess.DEVNULL,
                    )
                )
        finally:
            os.close(orders_in)  # the child's ends: its exit is then the pipe's end
            os.close(facts_out)
        self._orders = Connection(orders_out, readable=False)
        self._facts = Connection(facts_in, writable=False)

    def read(self, order: ReadOrder) -> Iterator[Facts]:
        """Every entry's facts, in log order, as the child sends them."""
        for batch in self.read_batches(order):
            yield from batch

    def read_batches(self, order: ReadOrder) -> Iterator[list[Facts]]:
        """:meth:`read`'s facts in the batches the child sends (up to :data:`BATCH`)."""
        if self._orders is None or self._facts is None:
            raise RuntimeError("ReadingProcess.read before start")
        facts = self._facts
        try:
            self._orders.send_bytes(pickle.dumps(order))
        except OSError as exc:
            raise UnavailableError(f"the reading process is gone: {exc}") from exc
        while True:
            try:
                blob = facts.recv_bytes()
            except (EOFError, OSError):
                raise UnavailableError(
                    f"the reading process ended before the log did (exit code {self._exit()})"
                ) from None
            tag = blob[:1]
            if tag == _FACTS:
                yield marshal.loads(memoryview(blob)[1:])
            elif tag == _MIXED:
                yield _decoded(marshal.loads(memoryview(blob)[1:]))
            elif tag == _END:
                return
            else:
                raise pickle.loads(blob[1:])

    def _exit(self) -> int | None:
        process = self._process
        if process is None:
            return None
        process.join(_STOP_S)
        code: int | None = process.exitcode
        return code

    def terminate(self) -> None:
        """Stop the child if it still runs, from any thread: a :meth:`read` waiting on
        it then sees the pipe's end (the pipes stay open: :meth:`close` frees them)."""
        process = self._process
        if process is not None and process.is_alive():
            process.terminate()

    def close(self) -> None:
        """Stop the child if it still runs (Ctrl-C, an error in the rules) and free the
        pipes; safe to call twice. Call it from the thread that reads."""
        self.terminate()
        process, self._process = self._process, None
        if process is not None:
            process.join(_STOP_S)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in (self._orders, self._facts):
            if conn is not None:
                conn.close()
        self._orders = self._facts = None


class ReadingThread:
    """:class:`ReadingProcess`'s interface, read in the caller's thread through
    ``entries_of`` (:func:`~streamwal.verify.reading.iter_topic`'s signature): for a
    topic that exists only in this process (a test's stand-in for the broker). The
    same facts as the process sends, on one core."""

    def __init__(self, entries_of: Callable[..., Iterable[BackendMessage]] = iter_topic) -> None:
        self._entries_of = entries_of

    def __enter__(self) -> ReadingThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Nothing to start: :meth:`read` reads."""

    def read(self, order: ReadOrder) -> Iterator[Facts]:
        for batch in self.read_batches(order):
            yield from batch

    def read_batches(self, order: ReadOrder) -> Iterator[list[Facts]]:
        """Batches of up to :data:`BATCH` facts, as the process sends them."""
        decode_id = PulsarMessageId.from_bytes
        entries = self._entries_of(
            order.service_url,
            order.topic,
            start=decode_id(order.start) if order.start is not None else None,
            inclusive=order.inclusive,
            since_ms=order.since_ms,
        )
        batch: list[Facts] = []
        for raw in reassemble(order.channel, entries):
            batch.extend(entry_facts(raw, decode_id))
            if len(batch) >= BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    def terminate(self) -> None:
        """Nothing runs apart: the caller's stop event stops :meth:`read`."""

    def close(self) -> None:
        """Nothing to free."""


class _Spawned:
    """A spawned child behind the few calls of ``multiprocessing.Process`` used here
    (``multiprocessing``'s own spawn would leave its resource tracker running)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def terminate(self) -> None:
        self._popen.terminate()

    def kill(self) -> None:
        self._popen.kill()

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()


_SPAWN = (
    "import sys; from streamwal.verify.pipeline import _spawned; "
    "_spawned(int(sys.argv[1]), int(sys.argv[2]))"
)


def _spawned(orders: int, out: int) -> None:
    """The child's entry (forked or spawned): the pipes' descriptors it was handed."""
    _child(Connection(orders, writable=False), Connection(out, readable=False))


def _single_threaded() -> bool:
    """Whether this process runs one thread (native ones counted: a client library's)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _child(orders: Connection, out: Connection) -> None:
    """The child's life: one order, the read, the end or the error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller stops it
    try:
        order: ReadOrder = pickle.loads(orders.recv_bytes())
    except (EOFError, OSError):
        return  # the caller gave up before ordering
    try:
        _read(order, out)
        out.send_bytes(_END)
    except (BrokenPipeError, ConnectionResetError):
        return  # the caller is gone
    except BaseException as exc:
        with contextlib.suppress(OSError):
            out.send_bytes(_ERROR + _picklable(exc))


def _read(order: ReadOrder, out: Connection) -> None:
    """Read, rebuild chunked messages, decode, send. An entry builds no object but its
    facts: its parts go to :func:`~streamwal.verify.history.parts_facts`, and to the
    chunk assembler only when a chunked message is in the way (the assembler passes
    any other entry as it is, once it has seen one).

    An entry of at most :data:`RAW_MAX` bytes goes as it was read, for the caller to
    decode: on a channel of one small message per entry, reading an entry costs this
    process about as much as the rules and the store cost the caller, and decoding it
    here as well would leave the caller idle half the time (a pack, decoded here, is
    hundreds of messages for one read). A batch of such entries stays within
    :data:`BATCH` times :data:`RAW_MAX` bytes."""
    decode_id = PulsarMessageId.from_bytes
    start = decode_id(order.start) if order.start is not None else None
    entries = iter_entries(
        order.service_url,
        order.topic,
        start=start,
        inclusive=order.inclusive,
        since_ms=order.since_ms,
    )
    assembler = ChunkAssembler(order.channel)
    passes = False  # the assembler has seen an entry: it passes a plain one as it is
    batch: list[Any] = []
    extend, append, send, dumps = batch.extend, batch.append, out.send_bytes, marshal.dumps
    id_bytes = PulsarMessageId.bytes_of
    tag = _FACTS  # _MIXED once the batch holds an entry as it was read
    for key, payload, properties in entries:
        if (
            passes
            and KEY_CHUNK_ID not in properties  # a chunk of log format v1
            and (FORMAT_PROPERTY not in properties or not is_chunk(payload))  # of v2
            and assembler.idle
        ):
            if type(payload) is bytes and len(payload) <= RAW_MAX:
                append((id_bytes(*key), payload, properties))
                tag = _MIXED
            else:
                extend(parts_facts(id_bytes(*key), payload, properties, decode_id))
        else:
            whole = assembler.feed(BackendMessage(PulsarMessageId(*key), payload, properties))
            if whole is None:
                continue
            passes = True
            extend(entry_facts(whole, decode_id))
        if len(batch) >= BATCH:
            send(tag + dumps(batch))
            batch.clear()
            tag = _FACTS
    if batch:
        send(tag + dumps(batch))


def _decoded(batch: list[Any]) -> list[Facts]:
    """A mixed batch's facts: an entry sent as it was read (id, payload, properties)
    decoded here, as the child would have decoded it."""
    decode_id = PulsarMessageId.from_bytes
    out: list[Facts] = []
    append, extend = out.append, out.extend
    for item in batch:
        if len(item) == 3:
            extend(parts_facts(item[0], item[1], item[2], decode_id))
        else:
            append(item)
    return out


def _picklable(exc: BaseException) -> bytes:
    """``exc`` pickled, or an :class:`UnavailableError` that names it when it is not."""
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
        return blob
    except Exception:
        return pickle.dumps(UnavailableError(f"the reading process failed: {exc!r}"))
