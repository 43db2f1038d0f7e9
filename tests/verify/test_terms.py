"""The term rules on hand-built logs, written through the codec: ``term-decreased`` and
``term-without-owner-start`` fire on the log that breaks each, and a term of 0 (format
v1, or a log before terms) is exempt."""

from __future__ import annotations

import json
from pathlib import Path

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.verify.history import RULES, HistoryChecker, HistoryReport, check_history
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message import MessageType, MutableMessage, encode


def mid(entry: int) -> PulsarMessageId:
    return PulsarMessageId(7, entry)


def first_tick(entry: int, tt: int, node: int, term: int, log_format: int = 2) -> BackendMessage:
    msg = MutableMessage(MessageType.TIME_TICK).stamped(tt, None, node)
    return BackendMessage(mid(entry), *encode(msg, log_format=log_format, term=term))


def tick(entry: int, tt: int, node: int, confirms: int, term: int) -> BackendMessage:
    """A time tick that is not a first one (it confirms an earlier message)."""
    msg = MutableMessage(MessageType.TIME_TICK).stamped(tt, mid(confirms), node)
    return BackendMessage(mid(entry), *encode(msg, term=term))


def data(
    entry: int, tt: int, node: int, confirms: int, term: int, log_format: int = 2
) -> BackendMessage:
    msg = MutableMessage("Insert", f"p{entry}".encode()).stamped(tt, mid(confirms), node)
    return BackendMessage(mid(entry), *encode(msg, log_format=log_format, term=term))


def check(log: list[BackendMessage]) -> HistoryReport:
    return check_history(log, PulsarMessageId.from_bytes, [])


def rules(report: HistoryReport) -> list[tuple[str, str]]:
    return [(v.rule, v.message_id) for v in report.violations]


def three_terms() -> list[BackendMessage]:
    return [
        first_tick(0, 100, 1, term=1),
        data(1, 101, 1, 0, term=1),
        first_tick(2, 200, 2, term=2),
        data(3, 201, 2, 2, term=2),
        first_tick(4, 300, 1, term=5),  # terms need not be consecutive, only growing
        data(5, 301, 1, 4, term=5),
    ]


def test_the_rules_are_named() -> None:
    assert {"term-decreased", "term-without-owner-start"} <= set(RULES)


def test_terms_that_grow_at_each_owner_s_first_time_tick_pass() -> None:
    report = check(three_terms())
    assert report.ok, report.summary()
    assert [n for n, _ in report.owners] == [1, 2, 1]


def test_the_same_owner_reopening_under_its_term_passes() -> None:
    # Milvus's framework reopens a channel with an equal term on the same node
    log = [*three_terms(), first_tick(6, 400, 1, term=5), data(7, 401, 1, 6, term=5)]
    assert check(log).ok


def test_a_message_under_a_lower_term_after_a_higher_one_is_flagged() -> None:
    # node 1 writes under term 1 after node 2 opened term 2; its last-confirmed id lies
    # inside node 2's ownership, so only the term tells it is stale
    log = [*three_terms()[:4], data(4, 202, 1, 3, term=1)]
    report = check(log)
    assert ("term-decreased", "7:4") in rules(report)
    detail = next(v.detail for v in report.violations if v.rule == "term-decreased")
    assert "term 1, below term 2 (at 7:2)" in detail


def test_a_first_time_tick_under_a_lower_term_is_flagged() -> None:
    log = [*three_terms(), first_tick(6, 400, 2, term=3), data(7, 401, 2, 6, term=3)]
    assert rules(check(log)) == [("term-decreased", "7:6"), ("term-decreased", "7:7")]


def test_a_caller_s_message_beginning_a_term_is_flagged() -> None:
    # the same node, the same ownership, and suddenly a higher term: no owner started it
    log = [*three_terms()[:4], data(4, 202, 2, 3, term=3), data(5, 203, 2, 4, term=3)]
    report = check(log)
    assert rules(report) == [("term-without-owner-start", "7:4")]  # once per change
    assert "began term 3 (after term 2) with a caller's message" in report.violations[0].detail


def test_a_wal_record_beginning_a_term_that_is_not_a_first_time_tick_is_flagged() -> None:
    log = [*three_terms()[:4], tick(4, 202, 2, 3, term=3), data(5, 203, 2, 4, term=3)]
    report = check(log)
    assert rules(report) == [("term-without-owner-start", "7:4")]
    assert "with a TimeTick record" in report.violations[0].detail


def test_a_lower_term_after_an_unstarted_one_is_still_a_decrease() -> None:
    log = [*three_terms()[:4], data(4, 202, 2, 3, term=3), data(5, 203, 2, 4, term=2)]
    assert rules(check(log)) == [
        ("term-without-owner-start", "7:4"),
        ("term-decreased", "7:5"),
    ]


def test_format_v1_messages_have_no_term_and_are_exempt() -> None:
    log = [
        first_tick(0, 100, 1, term=0, log_format=1),
        data(1, 101, 1, 0, term=0, log_format=1),
        first_tick(2, 200, 2, term=4),
        data(3, 201, 2, 2, term=4),
        data(4, 202, 2, 2, term=0, log_format=1),  # term 0: unknown, not a decrease
    ]
    assert check(log).ok


def test_an_owner_moving_from_v1_to_v2_while_it_writes_takes_its_first_known_term() -> None:
    log = [
        first_tick(0, 100, 1, term=2),
        data(1, 101, 1, 0, term=2),
        first_tick(2, 200, 2, term=0, log_format=1),  # an owner of the old format
        data(3, 201, 2, 2, term=0, log_format=1),
        data(4, 202, 2, 2, term=3),  # the same owner, now writing v2 under its term
        data(5, 203, 2, 4, term=3),
    ]
    assert check(log).ok


def test_a_log_read_from_inside_an_ownership_takes_its_first_term() -> None:
    log = three_terms()
    report = check_history(log[3:], PulsarMessageId.from_bytes, [], truncated_before=mid(3))
    assert report.ok, report.summary()


def test_a_checkpoint_keeps_the_highest_term(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    log = three_terms()
    with HistoryChecker(PulsarMessageId.from_bytes, store=store) as before:
        for raw in log:
            before.feed(raw)
        before.finish()
        state = json.loads(json.dumps(before.state()))
    with HistoryChecker(PulsarMessageId.from_bytes, store=store) as after:
        after.restore(state)
        after.feed(data(6, 302, 1, 4, term=4))  # below term 5, read before the checkpoint
        after.feed(data(7, 303, 1, 4, term=6))  # above it, in the same ownership
        report = after.finish()
    assert rules(report) == [
        ("term-decreased", "7:6"),
        ("term-without-owner-start", "7:7"),
    ]
    assert "below term 5 (at 7:4)" in report.violations[0].detail
