"""The exactly-once rules of the history checker on hand-built logs: each fires on the
log that breaks it, and a clean log with transactions and idempotent appends passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.cli import main
from streamwal.verify.acks import Ack, TxnOutcome, TxnRecord, digest
from streamwal.verify.history import HistoryReport, check_history
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message import MessageType, MutableMessage, encode
from tests.verify.test_history import fake_topic, first_tick, mid

__all__ = ["fake_topic"]  # the fixture, shared with the checker's own tests

NODE = 1


def entry(entry: int, tt: int, msg: MutableMessage, node: int = NODE) -> BackendMessage:
    body, props = encode(msg.stamped(tt, mid(0), node))
    return BackendMessage(mid(entry), body, props)


def insert(
    payload: bytes, txn: int | None = None, pid: int | None = None, seq: int = 0
) -> MutableMessage:
    msg = MutableMessage(MessageType.INSERT, payload, "v", txn_id=txn)
    return msg if pid is None else msg.with_producer(pid, seq)


def begin() -> MutableMessage:
    return MutableMessage(MessageType.BEGIN_TXN, b"10000", "v")


def commit(txn: int, count: int) -> MutableMessage:
    return MutableMessage(MessageType.COMMIT_TXN, str(count).encode(), "v", txn_id=txn)


def rollback(txn: int) -> MutableMessage:
    return MutableMessage(MessageType.ROLLBACK_TXN, b"", "v", txn_id=txn)


def check(
    log: list[BackendMessage],
    delivered: list[int] | None = None,
    txns: list[TxnRecord] | None = None,
) -> HistoryReport:
    ids = None if delivered is None else [mid(e).to_bytes() for e in delivered]
    return check_history(log, PulsarMessageId.from_bytes, delivered=ids, txns=txns or [])


def rules(report: HistoryReport) -> list[tuple[str, str]]:
    return [(v.rule, v.message_id) for v in report.violations]


def clean_log() -> list[BackendMessage]:
    return [
        first_tick(0, 100, NODE),
        entry(1, 101, begin()),  # transaction 101
        entry(2, 102, insert(b"a", txn=101)),
        entry(3, 103, insert(b"x", pid=9, seq=0)),
        entry(4, 104, insert(b"b", txn=101)),
        entry(5, 105, commit(101, 2)),
        entry(6, 106, begin()),  # transaction 106, rolled back
        entry(7, 107, insert(b"c", txn=106)),
        entry(8, 108, rollback(106)),
        entry(9, 109, begin()),  # transaction 109, cut by the next owner
        entry(10, 110, insert(b"d", txn=109)),
        first_tick(11, 200, 2),
    ]


def test_a_clean_log_passes_and_counts_what_it_saw() -> None:
    report = check(clean_log(), delivered=[0, 3, 1, 2, 4, 5, 11])
    assert report.ok, report.summary()
    assert report.idempotent == 1
    assert report.transactions == {"committed": 1, "rolled-back": 1, "cut": 1}
    assert "transactions: 1 committed, 1 cut, 1 rolled-back" in report.summary()


def test_a_retried_idempotent_append_persisted_twice() -> None:
    log = clean_log()
    log.insert(6, entry(12, 105, insert(b"x", pid=9, seq=0)))
    assert ("idempotent-duplicated", str(mid(12))) in rules(check(log))


def test_a_commit_that_does_not_count_the_log() -> None:
    log = clean_log()
    log[5] = entry(5, 105, commit(101, 3))
    assert rules(check(log)) == [("txn-incomplete", str(mid(5)))]


def test_a_deposed_owners_commit_after_the_new_first_time_tick() -> None:
    log = [*clean_log(), entry(12, 201, commit(109, 1))]
    found = rules(check(log))
    assert ("txn-orphan", str(mid(12))) in found
    assert ("stale-owner", str(mid(12))) in found


def test_messages_of_a_transaction_never_begun_or_already_ended() -> None:
    log = clean_log()[:-1]
    log += [entry(13, 111, insert(b"late", txn=101)), entry(14, 112, insert(b"no", txn=4242))]
    assert rules(check(log)) == [("txn-orphan", str(mid(13))), ("txn-orphan", str(mid(14)))]


def test_delivering_a_rolled_back_or_cut_transaction() -> None:
    found = rules(check(clean_log(), delivered=[7, 10]))
    assert found == [
        ("txn-delivered-uncommitted", mid(7).to_bytes().hex()),
        ("txn-delivered-uncommitted", mid(10).to_bytes().hex()),
    ]


def test_delivering_a_committed_transaction_in_part() -> None:
    found = rules(check(clean_log(), delivered=[1, 2, 5]))
    assert found == [("txn-delivered-partial", mid(1).to_bytes().hex())]


def test_a_truncated_log_may_begin_inside_a_transaction() -> None:
    log = clean_log()[2:]
    report = check_history(log, PulsarMessageId.from_bytes, truncated_before=mid(2))
    assert report.ok, report.summary()


def test_verify_checks_what_a_reader_delivered(
    fake_topic: list[BackendMessage], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_topic.extend(clean_log())
    delivered = tmp_path / "delivered.txt"
    delivered.write_text("".join(mid(e).to_bytes().hex() + "\n" for e in (0, 1, 2, 4, 5)))
    assert main(["verify", "--channel", "chk", "--delivered", str(delivered)]) == 0
    assert "transactions: 1 committed, 1 cut, 1 rolled-back" in capsys.readouterr().out
    delivered.write_text(mid(7).to_bytes().hex() + "\n")
    assert main(["verify", "--channel", "chk", "--delivered", str(delivered), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [v["rule"] for v in report["violations"]] == ["txn-delivered-uncommitted"]


def acked(entry: int, tt: int, payload: bytes) -> Ack:
    return Ack(mid(entry).to_bytes(), tt, digest(payload))


def told(txn: int, outcome: str) -> TxnRecord:
    """What the client of :func:`clean_log` was told of ``txn``, with the positions
    its acknowledgements named (101's commit and appends; nothing for the others)."""
    if outcome != TxnOutcome.COMMITTED:
        return TxnRecord(txn, outcome)
    members = (acked(2, 102, b"a"), acked(4, 104, b"b"))
    return TxnRecord(txn, outcome, acked(5, 105, b"2"), members)


EVERY_DELIVERY = [0, 3, 1, 2, 4, 5, 11]


def test_what_clients_were_told_matches_a_clean_log() -> None:
    records = [
        told(101, TxnOutcome.COMMITTED),
        told(106, TxnOutcome.ROLLED_BACK),
        told(109, TxnOutcome.ABANDONED),
    ]
    report = check(clean_log(), EVERY_DELIVERY, records)
    assert report.ok, report.summary()
    assert report.txn_outcomes == {"committed": 1, "rolled-back": 1, "abandoned": 1}
    assert report.txn_outcomes_committed == {"committed": 1}
    assert "1 committed (1 committed in the log)" in report.summary()


def test_an_acknowledged_commit_the_log_does_not_hold() -> None:
    not_committed = check(clean_log(), txns=[TxnRecord(106, TxnOutcome.COMMITTED)])
    assert [v.rule for v in not_committed.violations] == ["txn-commit-lost"]
    assert "does not commit" in not_committed.violations[0].detail
    elsewhere = TxnRecord(101, TxnOutcome.COMMITTED, acked(8, 108, b"2"))
    found = check(clean_log(), txns=[elsewhere]).violations
    assert [(v.rule, v.message_id) for v in found] == [("txn-commit-lost", mid(8).to_bytes().hex())]
    never_begun = check(clean_log(), txns=[TxnRecord(4242, TxnOutcome.COMMITTED)])
    assert [v.rule for v in never_begun.violations] == ["txn-commit-lost"]


def test_an_append_acknowledged_into_a_committed_transaction_and_not_in_it() -> None:
    record = told(101, TxnOutcome.COMMITTED)
    lost = TxnRecord(101, record.outcome, record.commit, (*record.members, acked(3, 103, b"x")))
    found = check(clean_log(), txns=[lost]).violations
    assert [v.rule for v in found] == ["txn-commit-lost"]
    assert "1 append(s) acknowledged" in found[0].detail


def test_a_transaction_told_rolled_back_or_expired_that_commits() -> None:
    for outcome in (TxnOutcome.ROLLED_BACK, TxnOutcome.EXPIRED, TxnOutcome.ABORTED):
        found = rules(check(clean_log(), txns=[TxnRecord(101, outcome)]))
        assert found == [("txn-ended-committed", mid(5).to_bytes().hex())], outcome
    # an unknown commit may have committed: no violation either way
    assert check(clean_log(), txns=[TxnRecord(101, TxnOutcome.UNKNOWN)]).ok


def test_an_acknowledged_commit_a_reader_did_not_get() -> None:
    found = rules(check(clean_log(), [0, 3, 11], [told(101, TxnOutcome.COMMITTED)]))
    assert found == [("txn-commit-undelivered", mid(5).to_bytes().hex())]


def test_a_transaction_message_delivered_twice() -> None:
    found = rules(check(clean_log(), [*EVERY_DELIVERY, 2]))
    assert found == [("txn-delivered-twice", mid(2).to_bytes().hex())]


def test_delivering_a_transaction_told_rolled_back_or_expired() -> None:
    for outcome in (TxnOutcome.ROLLED_BACK, TxnOutcome.EXPIRED):
        found = rules(check(clean_log(), [7], [TxnRecord(106, outcome)]))
        assert ("txn-ended-delivered", mid(7).to_bytes().hex()) in found, outcome
    # told expired while the log commits it: both the commit and its delivery are wrong
    found = rules(check(clean_log(), EVERY_DELIVERY, [TxnRecord(101, TxnOutcome.EXPIRED)]))
    assert found == [
        ("txn-ended-committed", mid(5).to_bytes().hex()),
        ("txn-ended-delivered", mid(1).to_bytes().hex()),
        ("txn-ended-delivered", mid(2).to_bytes().hex()),
        ("txn-ended-delivered", mid(4).to_bytes().hex()),
    ]
