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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from streamwal.verify.acks import TXN_ENDED, TxnOutcome, TxnRecord
from streamwal.wal.interceptors.txn.session import parse_decimal_payload
from streamwal.wal.message import ImmutableMessage, MessageType

__all__ = ["TXN_RULES", "ExactlyOnceReport", "check_exactly_once"]

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


@dataclass
class _Txn:
    members: list[bytes] = field(default_factory=list)  # message ids, begin first
    committed: bool = False
    commit_id: bytes | None = None  # its complete commit's


@dataclass
class ExactlyOnceReport:
    """Violations as (rule, message id text, detail); counts for the summary."""

    violations: list[tuple[str, str, str]] = field(default_factory=list)
    idempotent: int = 0
    transactions: dict[str, int] = field(default_factory=dict)
    """Transactions by how they ended: committed, rolled-back, cut (owner change), open."""
    txn_outcomes: dict[str, int] = field(default_factory=dict)
    """Transactions clients recorded, by what they were told (:class:`TxnOutcome`)."""
    txn_outcomes_committed: dict[str, int] = field(default_factory=dict)
    """Of those, the ones the log commits, by what the client was told."""


def check_exactly_once(
    messages: Sequence[ImmutableMessage],
    delivered: Iterable[bytes] | None = None,
    *,
    truncated: bool = False,
    records: Iterable[TxnRecord] = (),
) -> ExactlyOnceReport:
    report = ExactlyOnceReport()
    seen_sequences: dict[tuple[int, int], str] = {}
    open_txns: dict[int, _Txn] = {}
    ended: dict[int, _Txn] = {}
    ended_how: dict[str, int] = {}
    by_id: dict[bytes, int] = {}  # message id -> txn id, for delivered checks
    started = False  # an ownership began within what is checked

    def end(txn_id: int, how: str) -> None:
        txn = open_txns.pop(txn_id)
        ended[txn_id] = txn
        ended_how[how] = ended_how.get(how, 0) + 1

    for msg in messages:
        text = str(msg.message_id)
        if msg.producer_id is not None and msg.sequence is not None:
            report.idempotent += 1
            key = (msg.producer_id, msg.sequence)
            if key in seen_sequences:
                report.violations.append(
                    (
                        "idempotent-duplicated",
                        text,
                        f"producer {key[0]} sequence {key[1]} is already at {seen_sequences[key]}",
                    )
                )
            else:
                seen_sequences[key] = text
        kind = msg.type
        if kind is MessageType.TIME_TICK:
            if msg.last_confirmed == msg.message_id:  # a new ownership: the rest is cut
                started = True
                for cut in list(open_txns):
                    end(cut, "cut")
            continue
        if kind is MessageType.BEGIN_TXN:
            open_txns[msg.time_tick] = _Txn([msg.message_id.to_bytes()])
            by_id[msg.message_id.to_bytes()] = msg.time_tick
            continue
        txn_id = msg.txn_id
        if txn_id is None:
            continue
        txn = open_txns.get(txn_id)
        if txn is None:
            if truncated and not started:
                continue  # its begin may be before the truncation point
            report.violations.append(
                ("txn-orphan", text, f"transaction {txn_id} is not open in this ownership")
            )
            continue
        if kind is MessageType.ROLLBACK_TXN:
            end(txn_id, "rolled-back")
        elif kind is MessageType.COMMIT_TXN:
            count = parse_decimal_payload(msg.payload)
            if count != len(txn.members) - 1:
                report.violations.append(
                    (
                        "txn-incomplete",
                        text,
                        f"transaction {txn_id} commits {count} messages, the log holds "
                        f"{len(txn.members) - 1}",
                    )
                )
            else:
                txn.committed = True
                txn.commit_id = msg.message_id.to_bytes()
            end(txn_id, "committed")
        else:
            txn.members.append(msg.message_id.to_bytes())
            by_id[msg.message_id.to_bytes()] = txn_id
    if open_txns:
        ended_how["open"] = len(open_txns)
        ended.update(open_txns)
    report.transactions = ended_how
    told = list(records)
    _check_records(report, told, ended, truncated)
    if delivered is not None:
        _check_delivered(report, delivered, by_id, ended, told)
    return report


def _check_records(
    report: ExactlyOnceReport, records: list[TxnRecord], txns: dict[int, _Txn], truncated: bool
) -> None:
    """Each client's answer against the log: a commit acknowledged is there whole at its
    position; a transaction it was told ended is not committed."""
    for record in records:
        outcomes = report.txn_outcomes
        outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
        txn = txns.get(record.txn_id)
        if txn is not None and txn.committed:
            counted = report.txn_outcomes_committed
            counted[record.outcome] = counted.get(record.outcome, 0) + 1
        if record.outcome == TxnOutcome.COMMITTED:
            problem = _commit_problem(record, txn, truncated)
            if problem is not None:
                at = record.commit.message_id.hex() if record.commit else str(record.txn_id)
                report.violations.append(("txn-commit-lost", at, problem))
        elif record.outcome in TXN_ENDED and txn is not None and txn.committed:
            at = (txn.commit_id or b"").hex()
            report.violations.append(
                (
                    "txn-ended-committed",
                    at,
                    f"transaction {record.txn_id} commits in the log; its client was told "
                    f"{record.outcome}",
                )
            )


def _commit_problem(record: TxnRecord, txn: _Txn | None, truncated: bool) -> str | None:
    txn_id = record.txn_id
    if txn is None:
        return None if truncated else f"transaction {txn_id} is not in the log"
    if not txn.committed:
        return f"transaction {txn_id} does not commit in the log"
    if record.commit is not None and record.commit.message_id != txn.commit_id:
        return f"transaction {txn_id}'s commit is not at the acknowledged position"
    members = set(txn.members)
    lost = [a for a in record.members if a.message_id not in members]
    if lost:
        return (
            f"{len(lost)} append(s) acknowledged into transaction {txn_id} are not "
            "among its messages"
        )
    return None


def _check_delivered(
    report: ExactlyOnceReport,
    delivered: Iterable[bytes],
    by_id: dict[bytes, int],
    txns: dict[int, _Txn],
    records: list[TxnRecord],
) -> None:
    got: dict[int, set[bytes]] = {}
    ended = {r.txn_id: r.outcome for r in records if r.outcome in TXN_ENDED}
    for message_id in delivered:
        txn_id = by_id.get(message_id)
        if txn_id is None:
            continue
        txn = txns[txn_id]
        if message_id in got.get(txn_id, ()):
            report.violations.append(
                (
                    "txn-delivered-twice",
                    message_id.hex(),
                    f"a message of transaction {txn_id} delivered more than once",
                )
            )
        if txn_id in ended:
            report.violations.append(
                (
                    "txn-ended-delivered",
                    message_id.hex(),
                    f"delivered, but its client was told transaction {txn_id} {ended[txn_id]}",
                )
            )
        if not txn.committed:
            report.violations.append(
                (
                    "txn-delivered-uncommitted",
                    message_id.hex(),
                    f"delivered, but transaction {txn_id} did not commit",
                )
            )
        got.setdefault(txn_id, set()).add(message_id)
    for txn_id, ids in got.items():
        txn = txns[txn_id]
        if txn.committed and ids != set(txn.members):
            report.violations.append(
                (
                    "txn-delivered-partial",
                    txn.members[0].hex(),
                    f"transaction {txn_id}: {len(ids)} of {len(txn.members)} messages delivered",
                )
            )
    for record in records:
        told = txns.get(record.txn_id)
        if (
            record.outcome == TxnOutcome.COMMITTED
            and told is not None
            and told.committed
            and record.txn_id not in got
        ):
            report.violations.append(
                (
                    "txn-commit-undelivered",
                    (told.commit_id or b"").hex(),
                    f"transaction {record.txn_id}'s commit was acknowledged and a reader "
                    "got nothing of it",
                )
            )
