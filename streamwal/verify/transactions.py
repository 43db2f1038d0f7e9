"""Exactly-once rules of the history checker: idempotent appends and transactions.

Checked from the log alone, in log order (``messages`` decoded, after the truncation
point if any):

- ``idempotent-duplicated``: a producer id and sequence number appear more than once
  (a retried idempotent append was persisted twice);
- ``txn-incomplete``: a ``CommitTxn`` whose count is not the number of messages of its
  transaction in the log (a reader would deliver it incomplete, or not at all);
- ``txn-orphan``: a message, commit or rollback of a transaction that is not open in
  the current ownership: never begun, already ended, or begun by an earlier owner
  (Milvus #53368: a deposed owner's commit behind the new owner's first time tick).

And, given what a reader delivered (message ids, in delivery order):

- ``txn-delivered-uncommitted``: a delivered message of a transaction that did not
  commit (rolled back, expired, cut by a change of owner, or still open);
- ``txn-delivered-partial``: a committed transaction delivered only in part;
- ``txn-delivered-twice``: a message of a transaction delivered more than once.

And, given what clients were told of their transactions (:class:`TxnRecord`):

- ``txn-commit-lost``: an acknowledged commit that is not in the log as that
  transaction's complete commit at the acknowledged position, or an append
  acknowledged into it that is not one of its messages (a reader would not get it);
- ``txn-ended-committed``: a transaction its client was told was rolled back or
  expired (or aborted, or abandoned with no commit sent) committed in the log;
- with what a reader delivered, ``txn-commit-undelivered``: an acknowledged commit
  of which nothing was delivered; ``txn-ended-delivered``: a message of a transaction
  its client was told was rolled back or expired, delivered.

A client that retried a commit whose answer was lost, and then heard "not written"
from a later try, would have told its caller the transaction did not commit while
its first try had committed it: these rules compare each answer with the log, so
such a lie is reported whichever answer the client gave.

A log checked from a truncation point may begin inside a transaction: its messages
before its begin are counted, not reported.

Streaming: :class:`ExactlyOnceChecker` is fed the log's messages one at a time (what
the rules read of each: :data:`~streamwal.verify.facts.Facts`). In
memory it keeps the transactions open in the current ownership (id, serial, first
message, member count: bounded by how many transactions are open at once, not by the
log's length) and a few counters. Every per-message fact goes to the check's
:class:`~streamwal.verify.store.Store`: idempotent (producer, sequence) pairs, each
transaction's member ids and how it ended; duplicates, the client records and the
delivered ids are checked by queries on it once the log is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from streamwal.verify.acks import TXN_ENDED, TxnOutcome, TxnRecord
from streamwal.verify.facts import Facts
from streamwal.verify.store import Store
from streamwal.wal.message import MessageType

__all__ = ["TXN_RULES", "Emit", "ExactlyOnceChecker", "ExactlyOnceReport"]

TXN_RULES = (
    "idempotent-duplicated",
    "txn-incomplete",
    "txn-orphan",
    "txn-delivered-uncommitted",
    "txn-delivered-partial",
    "txn-delivered-twice",
    "txn-commit-lost",
    "txn-ended-committed",
    "txn-commit-undelivered",
    "txn-ended-delivered",
)

#: ``emit(phase, position, rule, message id text, detail)``: records one violation
Emit = Callable[[int, int, str, str, str], None]

#: the report's order: log rules, then client records, then deliveries
PHASE_LOG, PHASE_RECORDS, PHASE_DELIVERED = 1, 2, 3


@dataclass
class _Open:
    """An open transaction: its members are on disk, only their count here."""

    serial: int
    first: bytes  # its begin's id
    members: int = 1  # the begin included


@dataclass
class ExactlyOnceReport:
    """Counts for the summary (violations go through ``emit``)."""

    idempotent: int = 0
    transactions: dict[str, int] = field(default_factory=dict)
    """Transactions by how they ended: committed, rolled-back, cut (owner change), open."""
    txn_outcomes: dict[str, int] = field(default_factory=dict)
    """Transactions clients recorded, by what they were told (:class:`TxnOutcome`)."""
    txn_outcomes_committed: dict[str, int] = field(default_factory=dict)
    """Of those, the ones the log commits, by what the client was told."""


class ExactlyOnceChecker:
    """The exactly-once rules fed one message at a time, in log order."""

    def __init__(self, store: Store, emit: Emit, *, truncated: bool = False) -> None:
        self._store = store
        self._emit = emit
        self._truncated = truncated
        self.report = ExactlyOnceReport()
        self._open: dict[int, _Open] = {}
        self._serial = 0
        self._started = False  # an ownership began within what is checked

    # ---- the checkpoint: what a next run needs to continue ---------------------------

    def state(self) -> dict[str, Any]:
        return {
            "serial": self._serial,
            "started": self._started,
            "truncated": self._truncated,
            "open": [[t, o.serial, o.first.hex(), o.members] for t, o in self._open.items()],
        }

    def restore(self, state: dict[str, Any]) -> None:
        self._serial = int(state["serial"])
        self._started = bool(state["started"])
        self._truncated = self._truncated or bool(state.get("truncated"))
        self._open = {
            int(t): _Open(int(s), bytes.fromhex(f), int(m)) for t, s, f, m in state["open"]
        }

    # ---- the log ------------------------------------------------------------------

    def _end(self, txn_id: int, how: str, commit_id: bytes | None = None) -> None:
        txn = self._open.pop(txn_id)
        self._store.add(
            "txn",
            (txn_id, txn.serial, how, commit_id is not None, commit_id, txn.members, txn.first),
        )
        ended = self.report.transactions
        ended[how] = ended.get(how, 0) + 1

    def feed(self, facts: Facts, kind: MessageType | None, pos: int, text: str) -> None:
        """One message's :data:`~streamwal.verify.facts.Facts` (``kind``: its type if the
        WAL wrote it, ``None`` for a caller's message)."""
        message_id, _, time_tick, _, confirmed, _, producer, sequence, txn_id, count, _ = facts
        if producer is not None and sequence is not None:
            self.report.idempotent += 1
            self._store.add("seq", (producer, sequence, pos, text))
        if kind is MessageType.TIME_TICK:
            if confirmed == message_id:  # a new ownership: the rest is cut
                self._started = True
                for cut in list(self._open):
                    self._end(cut, "cut")
            return
        if kind is MessageType.BEGIN_TXN:
            self._serial += 1
            if time_tick in self._open:  # the same id begun twice: the first is lost
                self._open.pop(time_tick)
            self._open[time_tick] = _Open(self._serial, message_id)
            self._store.add("member", (message_id, time_tick, self._serial, pos))
            return
        if txn_id is None:
            return
        txn = self._open.get(txn_id)
        if txn is None:
            if self._truncated and not self._started:
                return  # its begin may be before the truncation point
            self._emit(
                PHASE_LOG,
                pos,
                "txn-orphan",
                text,
                f"transaction {txn_id} is not open in this ownership",
            )
            return
        if kind is MessageType.ROLLBACK_TXN:
            self._end(txn_id, "rolled-back")
        elif kind is MessageType.COMMIT_TXN:
            if count != txn.members - 1:
                self._emit(
                    PHASE_LOG,
                    pos,
                    "txn-incomplete",
                    text,
                    f"transaction {txn_id} commits {count} messages, the log holds "
                    f"{txn.members - 1}",
                )
                self._end(txn_id, "committed")
            else:
                self._end(txn_id, "committed", message_id)
        else:
            txn.members += 1
            self._store.add("member", (message_id, txn_id, txn.serial, pos))

    # ---- once the log is read -----------------------------------------------------

    def finish(
        self,
        delivered: Iterable[bytes] | None,
        records: Iterable[TxnRecord],
        since: int,
    ) -> ExactlyOnceReport:
        """The rules that need the whole log: duplicates of an idempotent append
        (those at position ``since`` or after: this run's), the clients' records and
        the delivered ids. The transactions still open are stored as open (a next
        run replaces them as they end)."""
        store = self._store
        for txn_id, txn in self._open.items():
            store.add("txn", (txn_id, txn.serial, "open", False, None, txn.members, txn.first))
        if self._open:
            self.report.transactions["open"] = len(self._open)
        self._duplicates(since)
        store.execute("DELETE FROM told")
        store.index("member_id", "member_txn")
        self._records(records)
        if delivered is not None:
            self._delivered(delivered)
        return self.report

    def _duplicates(self, since: int) -> None:
        store = self._store
        if store.one("SELECT 1 FROM seq LIMIT 1") is None:
            return
        store.index("seq_key")
        keys = list(
            store.rows(
                "SELECT pid, sq FROM seq GROUP BY pid, sq HAVING COUNT(*) > 1 AND MAX(pos) >= ?",
                (since,),
            )
        )
        for pid, sq in keys:
            rows = list(
                store.rows("SELECT pos, text FROM seq WHERE pid=? AND sq=? ORDER BY pos", (pid, sq))
            )
            first = rows[0][1]
            for pos, text in rows[1:]:
                if pos >= since:
                    self._emit(
                        PHASE_LOG,
                        pos,
                        "idempotent-duplicated",
                        text,
                        f"producer {pid} sequence {sq} is already at {first}",
                    )

    def _records(self, records: Iterable[TxnRecord]) -> None:
        """Each client's answer against the log: a commit acknowledged is there whole at
        its position; a transaction it was told ended is not committed."""
        store = self._store
        outcomes = self.report.txn_outcomes
        for n, record in enumerate(records):
            outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
            store.add("told", (n, record.txn_id, record.outcome))
            txn = store.one(
                "SELECT serial, committed, commit_id FROM txn WHERE txn=?", (record.txn_id,)
            )
            committed = txn is not None and bool(txn[1])
            if committed:
                counted = self.report.txn_outcomes_committed
                counted[record.outcome] = counted.get(record.outcome, 0) + 1
            if record.outcome == TxnOutcome.COMMITTED:
                problem = self._commit_problem(record, txn)
                if problem is not None:
                    at = record.commit.message_id.hex() if record.commit else str(record.txn_id)
                    self._emit(PHASE_RECORDS, 0, "txn-commit-lost", at, problem)
            elif record.outcome in TXN_ENDED and txn is not None and committed:
                self._emit(
                    PHASE_RECORDS,
                    0,
                    "txn-ended-committed",
                    (txn[2] or b"").hex(),
                    f"transaction {record.txn_id} commits in the log; its client was told "
                    f"{record.outcome}",
                )

    def _commit_problem(self, record: TxnRecord, txn: tuple[Any, ...] | None) -> str | None:
        txn_id = record.txn_id
        if txn is None:
            return None if self._truncated else f"transaction {txn_id} is not in the log"
        serial, committed, commit_id = txn
        if not committed:
            return f"transaction {txn_id} does not commit in the log"
        if record.commit is not None and record.commit.message_id != commit_id:
            return f"transaction {txn_id}'s commit is not at the acknowledged position"
        lost = sum(
            1
            for a in record.members
            if self._store.one(
                "SELECT 1 FROM member WHERE id=? AND txn=? AND serial=?",
                (a.message_id, txn_id, serial),
            )
            is None
        )
        if lost:
            return (
                f"{lost} append(s) acknowledged into transaction {txn_id} are not "
                "among its messages"
            )
        return None

    def _delivered(self, delivered: Iterable[bytes]) -> None:
        store = self._store
        store.execute("DELETE FROM delivered")
        store.add_many("delivered", enumerate(delivered))
        store.index("delivered_id")
        emit = self._emit
        for _, message_id, txn_id, committed, k, told in store.rows(
            """SELECT d.n, d.id, m.txn, t.committed,
                   ROW_NUMBER() OVER (PARTITION BY d.id ORDER BY d.n),
                   (SELECT o.outcome FROM told o WHERE o.txn = m.txn AND o.outcome IN
                    ('rolled-back', 'expired', 'aborted', 'abandoned') ORDER BY o.n DESC LIMIT 1)
               FROM delivered d JOIN member m ON m.id = d.id JOIN txn t ON t.txn = m.txn
               ORDER BY d.n"""
        ):
            hexid = message_id.hex()
            if k > 1:
                emit(
                    PHASE_DELIVERED,
                    0,
                    "txn-delivered-twice",
                    hexid,
                    f"a message of transaction {txn_id} delivered more than once",
                )
            if told is not None:
                emit(
                    PHASE_DELIVERED,
                    0,
                    "txn-ended-delivered",
                    hexid,
                    f"delivered, but its client was told transaction {txn_id} {told}",
                )
            if not committed:
                emit(
                    PHASE_DELIVERED,
                    0,
                    "txn-delivered-uncommitted",
                    hexid,
                    f"delivered, but transaction {txn_id} did not commit",
                )
        for txn_id, got, members, first in store.rows(
            """SELECT m.txn, COUNT(DISTINCT d.id), t.members, t.first
                   FROM delivered d JOIN member m ON m.id = d.id
                   JOIN txn t ON t.txn = m.txn AND t.serial = m.serial
                   WHERE t.committed GROUP BY m.txn ORDER BY MIN(d.n)"""
        ):
            if got != members:
                emit(
                    PHASE_DELIVERED,
                    0,
                    "txn-delivered-partial",
                    first.hex(),
                    f"transaction {txn_id}: {got} of {members} messages delivered",
                )
        for _, txn_id, commit_id in store.rows(
            """SELECT o.n, o.txn, t.commit_id FROM told o JOIN txn t ON t.txn = o.txn
               WHERE o.outcome = ? AND t.committed AND NOT EXISTS
                 (SELECT 1 FROM member m JOIN delivered d ON d.id = m.id WHERE m.txn = o.txn)
               ORDER BY o.n""",
            (TxnOutcome.COMMITTED,),
        ):
            emit(
                PHASE_DELIVERED,
                0,
                "txn-commit-undelivered",
                (commit_id or b"").hex(),
                f"transaction {txn_id}'s commit was acknowledged and a reader got nothing of it",
            )
