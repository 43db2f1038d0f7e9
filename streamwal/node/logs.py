"""A node's logs: every line names the node, and its Pulsar client's log is its own.

Several nodes may run on one host and their logs end up side by side (a terminal, a
journal, a collector), so each of the node's own lines carries ``node=<id>`` (text)
or a ``node`` field (``node.log_format: json``, one object per line, for collectors
that parse rather than grep).

The Pulsar C++ client logs natively into a file: through Python it would call into
the interpreter for every DEBUG line it might write (docs/performance.md, "What the
design choices save"). A native file logger cannot add the node's id to its lines,
and one file shared by the nodes of a host could not tell them apart. So the client writes, still
natively and filtered at WARN in C++, into a pipe; a thread of the node reads the few
lines that come through and appends each, with the node's id, in the node's format,
to the node's own file (:class:`ClientLogRelay`).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import re
import select
import sys
import threading
from pathlib import Path
from typing import IO, Any

import platformdirs

from streamwal.adaptors.pulsar.client_log import CLIENT_LOGGER, expected_line
from streamwal.node.config import LOG_FORMATS

__all__ = [
    "LOG_FORMATS",
    "ClientLogRelay",
    "NodeJsonFormatter",
    "NodeTextFormatter",
    "client_log_path",
    "default_log_dir",
    "node_formatter",
    "setup_node_logging",
]

#: what the node's ``pulsar.client_log_file`` defaults to (streamwal.node.config):
#: left so, the node writes its own file under ``node.log_dir`` instead
_SHARED_CLIENT_LOG = "pulsar-client.log"
#: the pipe's capacity: a burst of client lines (a reconnect storm) fits while the
#: relay thread waits for the GIL
_PIPE_BYTES = 1 << 20


def default_log_dir() -> Path:
    """The user's log folder (``~/.local/state/streamwal/log`` on Linux): where a node
    wrote its client log before it had a file of its own."""
    return platformdirs.user_log_path("streamwal")


class NodeTextFormatter(logging.Formatter):
    """``<time> <LEVEL> node=<id> <logger>: <message>``."""

    def __init__(self, node_id: int) -> None:
        super().__init__(f"%(asctime)s %(levelname)s node={node_id} %(name)s: %(message)s")
        self.node_id = node_id


class NodeJsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``node``, ``message`` and, when there is one, ``exception`` (the traceback). A
    line logged with ``extra={"fields": {...}}`` carries those fields too (the audit
    log's identity, operation, channel and outcome), so a collector need not parse
    the message."""

    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        entry: dict[str, Any] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "node": self.node_id,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                entry.setdefault(key, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # one line whatever the message holds: json escapes its newlines
        return json.dumps(entry, ensure_ascii=False, default=str)


def node_formatter(node_id: int, log_format: str) -> logging.Formatter:
    if log_format == "json":
        return NodeJsonFormatter(node_id)
    return NodeTextFormatter(node_id)


def setup_node_logging(node_id: int, log_format: str, level: str) -> logging.Formatter:
    """Give the root logger's handlers (stderr, from the command line) the node's
    format; ``warnings`` go through logging too, so that in JSON no line on stderr is
    anything but an object. Returns the formatter, for the client log."""
    formatter = node_formatter(node_id, log_format)
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler(sys.stderr))
    for handler in root.handlers:
        handler.setFormatter(formatter)
    root.setLevel(level.upper())
    logging.captureWarnings(True)
    return formatter


def client_log_path(config: Any) -> Path | None:
    """Where the node's Pulsar client log goes; ``None``: through Python logging (the
    operator set ``pulsar.client_log_file: ""``), so on stderr with the node's lines.

    ``pulsar.client_log_file`` left at the node's default (the host-wide file):
    ``<node.log_dir>/pulsar-client-node-<id>.log``; set to a path: that path.
    """
    configured = config.pulsar.client_log_file
    if not configured:
        return None
    path = Path(configured)
    if path.name == _SHARED_CLIENT_LOG and path.parent == default_log_dir():
        base = Path(config.node.log_dir).expanduser() if config.node.log_dir else default_log_dir()
        return base / f"pulsar-client-node-{config.node.id}.log"
    return path.expanduser()


#: a native line: ``2025-01-31 12:00:00.123 WARN  [140104216606400] ProducerImpl:774 | ...``
_NATIVE_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) +(DEBUG|INFO|WARN|ERROR) +\[[^\]]*\] (.*)$"
)
_NATIVE_LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
}


class ClientLogRelay:
    """The node's Pulsar client log: native lines in through a pipe, out into
    ``path`` with the node's id, in the node's format (see the module's text).

    :meth:`start` returns what ``pulsar.client_log_file`` must name for the client to
    write into the pipe. Every client the node creates opens it anew (one per written
    channel), so the pipe's write end stays open for the process's life; lines are
    written as they come, so a killed node loses none that reached the pipe's reader.
    """

    def __init__(self, path: Path, node_id: int, formatter: logging.Formatter) -> None:
        self.path = path
        self.node_id = node_id
        self.formatter = formatter
        self._read_fd = -1
        self._write_fd = -1
        self._wake: tuple[int, int] = (-1, -1)
        self._out: IO[str] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._emit(
            logging.INFO,
            f"node {self.node_id} (pid {os.getpid()}) writes its Pulsar client's "
            "warnings and errors here",
        )
        self._read_fd, self._write_fd = os.pipe()
        target = f"/dev/fd/{self._write_fd}"
        if not Path(target).exists():  # no /dev/fd: native into the file, lines without id
            self.close()
            return str(self.path)
        self._wake = os.pipe()
        os.set_blocking(self._read_fd, False)
        with contextlib.suppress(OSError, AttributeError):  # room for a burst (Linux)
            fcntl.fcntl(self._write_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        self._thread = threading.Thread(
            target=self._pump, name=f"pulsar-client-log-node-{self.node_id}", daemon=True
        )
        self._thread.start()
        return target

    def close(self, timeout: float = 2.0) -> None:
        """Write out what the pipe holds, then stop (the clients' lines after this are lost)."""
        running = False
        if self._thread is not None:
            os.write(self._wake[1], b"x")
            self._thread.join(timeout)
            running = self._thread.is_alive()  # it closes the read end when it ends
            self._thread = None
        read_fd = -1 if running else self._read_fd
        for fd in (self._write_fd, read_fd, *self._wake):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._read_fd = self._write_fd = -1
        self._wake = (-1, -1)
        if self._out is not None:
            self._out.close()
            self._out = None

    def _pump(self) -> None:
        """Relay lines until woken by :meth:`close`, then drain what is left. It
        always reads on: a full pipe would stop the client's threads in a write. If it
        stops for any other reason it closes the pipe's read end, so the client's
        writes fail (the lines are lost) instead of blocking its threads."""
        try:
            self._pump_lines()
        except Exception:
            logging.getLogger(__name__).exception("the Pulsar client log relay stopped")
        finally:
            read_fd, self._read_fd = self._read_fd, -1
            if read_fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(read_fd)

    def _pump_lines(self) -> None:
        pending = b""
        stopping = False
        while True:
            try:
                ready, _, _ = select.select([self._read_fd, self._wake[0]], [], [], None)
            except (OSError, ValueError):  # closed under it (a close that timed out)
                return
            if self._wake[0] in ready:
                stopping = True
            while True:
                try:
                    chunk = os.read(self._read_fd, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    return
                if not chunk:
                    stopping = True
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    try:
                        self._relay(line.decode("utf-8", errors="replace"))
                    except Exception:  # one line the relay cannot write: the next may
                        pass
            if stopping:
                if pending:
                    self._relay(pending.decode("utf-8", errors="replace"))
                return

    def _relay(self, line: str) -> None:
        if not line.strip():
            return
        match = _NATIVE_LINE.match(line)
        if match is None:  # not the client's usual shape: kept whole
            self._emit(logging.WARNING, line)
            return
        stamp, level, message = match.groups()
        try:
            created = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()
        except ValueError:
            created = None
        # a fence the WAL made or met on purpose, as the library logs it: not an
        # alarm for whoever greps the file for WARN and ERROR
        self._emit(
            logging.DEBUG if expected_line(message) else _NATIVE_LEVELS[level], message, created
        )

    def _emit(self, level: int, message: str, created: float | None = None) -> None:
        record = logging.LogRecord(CLIENT_LOGGER, level, "", 0, message, None, None)
        if created is not None:
            record.created = created
            record.msecs = (created - int(created)) * 1000
        out = self._out
        if out is None:
            return
        try:
            out.write(self.formatter.format(record) + "\n")
        except (OSError, ValueError):  # a full disk or a closed file must not stop the pump
            pass
