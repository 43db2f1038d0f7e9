"""The checker's on-disk store: per-message digests kept out of memory.

The rules that need the whole log (a payload persisted twice, an acknowledgement of
any position, what a reader was handed) cannot be checked with memory bounded by
anything but the log's length if they keep a dictionary per message. They keep
their rows here instead: one SQLite file (the standard library's, no server), written
in batches of a few thousand rows per transaction with the journal and fsyncs off
(the file is a scratch space: a crash loses a check, never a log), and indexed only
once the log has been read, when the rules that need a lookup run. SQLite's page
cache is capped (:data:`CACHE_KIB`), so its memory does not grow with the file.

Tables (``BLOB`` ids are the backend's ``MessageId.to_bytes()``, digests sha256):

- ``msg(id, tt, digest, pos, counted)``: each decoded message, ``counted`` unless it
  is a transaction marker (whose payload is a count, not a client's);
- ``foreign_entry(id, pos)``: entries that do not decode;
- ``seq(pid, sq, pos, text)``: idempotent appends (producer id, sequence number);
- ``member(id, txn, serial, pos)`` and ``txn(txn, serial, how, committed, commit_id,
  members, first)``: the messages of each transaction and how it ended;
- ``viol(run, phase, pos, n, rule, text, detail)``: every violation found, in the
  order the report lists them (the report keeps only the first ones in memory);
- ``ack``, ``delivery``, ``delivered``, ``failure``, ``told``: a run's inputs,
  streamed in.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["CACHE_KIB", "FLUSH_ROWS", "Store"]

#: SQLite's page cache, per connection: what the store may keep in memory
CACHE_KIB = 32 * 1024
#: rows buffered before one transaction writes them
FLUSH_ROWS = 5000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS msg(id BLOB, tt INTEGER, digest BLOB, pos INTEGER, counted INTEGER);
CREATE TABLE IF NOT EXISTS foreign_entry(id BLOB, pos INTEGER);
CREATE TABLE IF NOT EXISTS seq(pid INTEGER, sq INTEGER, pos INTEGER, text TEXT);
CREATE TABLE IF NOT EXISTS member(id BLOB, txn INTEGER, serial INTEGER, pos INTEGER);
CREATE TABLE IF NOT EXISTS txn(
    txn INTEGER PRIMARY KEY, serial INTEGER, how TEXT, committed INTEGER,
    commit_id BLOB, members INTEGER, first BLOB);
CREATE TABLE IF NOT EXISTS viol(
    run INTEGER, phase INTEGER, pos INTEGER, n INTEGER, rule TEXT, text TEXT, detail TEXT);
CREATE TABLE IF NOT EXISTS ack(
    n INTEGER, id BLOB, text TEXT, tt INTEGER, digest BLOB, truncated INTEGER);
CREATE TABLE IF NOT EXISTS delivery(n INTEGER, id BLOB, digest BLOB);
CREATE TABLE IF NOT EXISTS delivered(n INTEGER, id BLOB);
CREATE TABLE IF NOT EXISTS failure(n INTEGER, digest BLOB, hex TEXT, outcome TEXT);
CREATE TABLE IF NOT EXISTS told(n INTEGER, txn INTEGER, outcome TEXT);
"""

_INSERTS = {
    "msg": "INSERT INTO msg VALUES (?, ?, ?, ?, ?)",
    "foreign_entry": "INSERT INTO foreign_entry VALUES (?, ?)",
    "seq": "INSERT INTO seq VALUES (?, ?, ?, ?)",
    "member": "INSERT INTO member VALUES (?, ?, ?, ?)",
    "txn": "INSERT OR REPLACE INTO txn VALUES (?, ?, ?, ?, ?, ?, ?)",
    "viol": "INSERT INTO viol VALUES (?, ?, ?, ?, ?, ?, ?)",
    "ack": "INSERT INTO ack VALUES (?, ?, ?, ?, ?, ?)",
    "delivery": "INSERT INTO delivery VALUES (?, ?, ?)",
    "delivered": "INSERT INTO delivered VALUES (?, ?)",
    "failure": "INSERT INTO failure VALUES (?, ?, ?, ?)",
    "told": "INSERT INTO told VALUES (?, ?, ?)",
}

# built once the log is read, when a rule needs the lookup
_INDEXES = {
    "msg_id": "CREATE INDEX IF NOT EXISTS msg_id ON msg(id)",
    "foreign_id": "CREATE INDEX IF NOT EXISTS foreign_id ON foreign_entry(id)",
    "member_id": "CREATE INDEX IF NOT EXISTS member_id ON member(id)",
    "member_txn": "CREATE INDEX IF NOT EXISTS member_txn ON member(txn, serial)",
    "seq_key": "CREATE INDEX IF NOT EXISTS seq_key ON seq(pid, sq, pos)",
    "ack_text": "CREATE INDEX IF NOT EXISTS ack_text ON ack(text)",
    "ack_id": "CREATE INDEX IF NOT EXISTS ack_id ON ack(id)",
    "delivery_id": "CREATE INDEX IF NOT EXISTS delivery_id ON delivery(id)",
    "delivered_id": "CREATE INDEX IF NOT EXISTS delivered_id ON delivered(id)",
    "copies": "CREATE INDEX IF NOT EXISTS copies_digest ON copies(digest)",
}


class Store:
    """One SQLite file of a check: ``path`` if given (kept: a checkpoint's), else a
    fresh file in a temporary folder under ``work_dir`` (removed by :meth:`close`)."""

    def __init__(self, path: Path | None = None, work_dir: Path | None = None) -> None:
        self._temp: str | None = None
        if path is None:
            self._temp = tempfile.mkdtemp(prefix="streamwal-verify-", dir=work_dir)
            path = Path(self._temp) / "digests.db"
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in (
            "journal_mode=OFF",
            "synchronous=OFF",
            f"cache_size=-{CACHE_KIB}",
            "temp_store=FILE",
        ):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.executescript(_SCHEMA)
        self._pending: dict[str, list[tuple[Any, ...]]] = {table: [] for table in _INSERTS}
        self._rows = 0

    def add(self, table: str, row: tuple[Any, ...]) -> None:
        """Buffer one row; a full buffer is written in one transaction."""
        self._pending[table].append(row)
        self._rows += 1
        if self._rows >= FLUSH_ROWS:
            self.flush()

    def add_many(self, table: str, rows: Iterable[tuple[Any, ...]]) -> None:
        """Stream ``rows`` in, a transaction per :data:`FLUSH_ROWS` (never a list of
        them all: an acknowledgements file can be as long as the log)."""
        for row in rows:
            self.add(table, row)
        self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        db = self._db
        db.execute("BEGIN")
        for table, rows in self._pending.items():
            if rows:
                db.executemany(_INSERTS[table], rows)
                rows.clear()
        db.execute("COMMIT")
        self._rows = 0

    def index(self, *names: str) -> None:
        self.flush()
        for name in names:
            self._db.execute(_INDEXES[name])

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.flush()
        self._db.execute(sql, params)

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of a query, fetched as they are iterated."""
        self.flush()
        return iter(self._db.execute(sql, params))

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        self.flush()
        row: tuple[Any, ...] | None = self._db.execute(sql, params).fetchone()
        return row

    def forget_after(self, pos: int, run: int) -> None:
        """Drop what a run that never saved its checkpoint wrote (killed, interrupted):
        the rows of entries after position ``pos`` and the violations of runs after
        ``run``. A transaction it ended is ended again, the same way, as the log is read
        again (its row is replaced)."""
        for table in ("msg", "foreign_entry", "seq", "member"):
            self.execute(f"DELETE FROM {table} WHERE pos > ?", (pos,))
        self.execute("DELETE FROM viol WHERE run > ?", (run,))

    def size(self) -> int:
        """Bytes the store takes on disk."""
        self.flush()
        folder = self.path.parent if self._temp else None
        if folder is None:
            return self.path.stat().st_size if self.path.exists() else 0
        return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._db.close()
            if self._temp is not None:
                shutil.rmtree(self._temp, ignore_errors=True)

    @staticmethod
    def remove(path: Path) -> None:
        """Delete a kept store (a checkpoint's that cannot be resumed)."""
        if path.exists():
            os.unlink(path)
