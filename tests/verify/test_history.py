"""The history checker on hand-built logs: each rule fires on the log that breaks it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import streamwal.verify.cli
from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.cli import main
from streamwal.verify.acks import Ack, Delivery, Failure, digest, write_acks
from streamwal.verify.history import RULES, HistoryReport, check_history
from streamwal.verify.pipeline import ReadingThread
from streamwal.wal.backend import BackendMessage
from streamwal.wal.chunking import reassemble, split
from streamwal.wal.message import MessageType, MutableMessage, decode, encode


def mid(entry: int) -> PulsarMessageId:
    return PulsarMessageId(7, entry)


def first_tick(entry: int, tt: int, node: int) -> BackendMessage:
    payload, props = encode(MutableMessage(MessageType.TIME_TICK).stamped(tt, None, node))
    return BackendMessage(mid(entry), payload, props)


def data(
    entry: int, tt: int, node: int, confirms: int, payload: bytes | None = None
) -> BackendMessage:
    msg = MutableMessage(
        MessageType.INSERT, payload if payload is not None else f"p{entry}".encode()
    )
    body, props = encode(msg.stamped(tt, mid(confirms), node))
    return BackendMessage(mid(entry), body, props)


def foreign(entry: int, props: Mapping[str, str] | None = None) -> BackendMessage:
    return BackendMessage(mid(entry), b"not ours", dict(props or {}))


def payload_of(entry: BackendMessage) -> bytes:
    """The message's payload (an entry of format v2 holds it inside the WAL's frame)."""
    return decode(entry, PulsarMessageId.from_bytes).payload


def ack_of(entry: BackendMessage, tt: int) -> Ack:
    return Ack(entry.message_id.to_bytes(), tt, digest(payload_of(entry)))


def check(log: list[BackendMessage], acks: list[Ack] | None = None) -> HistoryReport:
    return check_history(log, PulsarMessageId.from_bytes, acks or [])


def rules(report: HistoryReport) -> list[tuple[str, str]]:
    return [(v.rule, v.message_id) for v in report.violations]


def two_owners() -> list[BackendMessage]:
    return [
        first_tick(0, 100, 1),
        data(1, 101, 1, 0),
        data(2, 102, 1, 1),
        first_tick(3, 200, 2),
        data(4, 201, 2, 3),
        data(5, 202, 2, 4),
    ]


def test_a_clean_log_with_two_owners_and_its_acks_passes() -> None:
    log = two_owners()
    acks = [ack_of(log[i], tt) for i, tt in ((1, 101), (2, 102), (4, 201), (5, 202))]
    report = check(log, acks)
    assert report.ok, report.summary()
    assert report.owners == [(1, "7:0"), (2, "7:3")]
    assert (report.messages, report.decoded, report.acks_checked) == (6, 6, 4)
    assert report.foreign == []
    assert "violations: 0" in report.summary()


def test_a_time_tick_regression_is_named_at_the_offending_message() -> None:
    log = [first_tick(0, 100, 1), data(1, 105, 1, 0), data(2, 103, 1, 1), data(3, 106, 1, 2)]
    report = check(log)
    assert rules(report) == [("time-tick-order", "7:2")]
    assert "not above 105 (at 7:1)" in report.violations[0].detail
    assert report.first_offending_ids == ["7:2"]


def test_an_equal_time_tick_is_a_regression_too() -> None:
    log = [first_tick(0, 100, 1), data(1, 101, 1, 0), data(2, 101, 1, 1)]
    assert rules(check(log)) == [("time-tick-order", "7:2")]


def test_a_first_time_tick_below_the_previous_owner_is_flagged() -> None:
    log = [first_tick(0, 100, 1), data(1, 150, 1, 0), first_tick(2, 120, 2), data(3, 151, 2, 2)]
    assert rules(check(log)) == [("first-time-tick", "7:2")]


def test_a_log_that_does_not_start_with_a_first_time_tick_is_flagged() -> None:
    log = [data(0, 100, 1, 0), first_tick(1, 101, 1), data(2, 102, 1, 1)]
    assert rules(check(log)) == [("owner-start", "7:0")]


def test_a_new_node_writing_without_a_first_time_tick_is_flagged() -> None:
    log = [first_tick(0, 100, 1), data(1, 101, 1, 0), data(2, 102, 3, 1), data(3, 103, 1, 1)]
    report = check(log)
    assert rules(report) == [("owner-start", "7:2")]
    assert "node 3 wrote without a first time tick" in report.violations[0].detail


def test_an_earlier_owner_writing_after_the_takeover_is_a_stale_owner() -> None:
    # the stale message's time tick is even above the new owner's: only ownership catches it
    log = [*two_owners(), data(6, 203, 1, 2)]
    report = check(log)
    assert rules(report) == [("stale-owner", "7:6")]
    assert "node 1 wrote after node 2 took over" in report.violations[0].detail


def test_the_same_node_writing_from_an_earlier_ownership_is_a_stale_owner() -> None:
    # node 1 owns, node 2 takes over, node 1 takes over again; then a message of node 1's
    # first ownership (it confirms 7:1, before node 1's second first time tick) shows up
    log = [
        first_tick(0, 100, 1),
        data(1, 101, 1, 0),
        first_tick(2, 200, 2),
        first_tick(3, 300, 1),
        data(4, 301, 1, 3),
        data(5, 302, 1, 1),
    ]
    report = check(log)
    assert rules(report) == [("stale-owner", "7:5")]
    assert "earlier ownership" in report.violations[0].detail
    assert report.owners == [(1, "7:0"), (2, "7:2"), (1, "7:3")]


def test_a_missing_acknowledgement_is_flagged() -> None:
    log = two_owners()
    lost = Ack(mid(99).to_bytes(), 300, digest(b"lost"))
    report = check(log, [ack_of(log[1], 101), lost])
    assert rules(report) == [("ack-missing", "7:99")]
    assert report.acks_checked == 2


def test_an_acknowledgement_with_another_time_tick_or_payload_is_flagged() -> None:
    log = two_owners()
    wrong_tick = ack_of(log[1], 999)
    wrong_payload = Ack(log[2].message_id.to_bytes(), 102, digest(b"something else"))
    report = check(log, [wrong_tick, wrong_payload])
    assert rules(report) == [("ack-changed", "7:1"), ("ack-changed", "7:2")]
    assert "time tick 101, acknowledged 999" in report.violations[0].detail
    assert "another payload" in report.violations[1].detail


def test_an_acknowledged_payload_persisted_twice_is_flagged() -> None:
    log = [first_tick(0, 100, 1), data(1, 101, 1, 0, b"once"), data(2, 102, 1, 1, b"once")]
    report = check(log, [ack_of(log[1], 101)])
    assert rules(report) == [("ack-duplicated", "7:1")]
    assert "persisted 2 times" in report.violations[0].detail


def test_a_later_append_acknowledged_at_an_earlier_one_s_position_is_flagged() -> None:
    """Issue 25: ``b`` landed, its answer was lost, its number was handed back and
    ``c`` went out with it; the node answered ``c`` with ``b``'s result. The log
    holds ``b`` once, so ``c`` is acknowledged and never written."""
    log = [first_tick(0, 100, 1), data(1, 101, 1, 0, b"b")]
    b = ack_of(log[1], 101)
    c = Ack(b.message_id, 101, digest(b"c"))
    report = check(log, [b, c])
    assert rules(report) == [("ack-position-shared", "7:1"), ("ack-changed", "7:1")]
    assert report.acked_violations == 2
    assert check(log, [b, b]).ok  # one append acknowledged twice (a retry) is no violation


def test_an_acknowledgement_pointing_at_a_foreign_entry_is_flagged() -> None:
    log = [first_tick(0, 100, 1), foreign(1)]
    report = check(log, [Ack(mid(1).to_bytes(), 101, digest(b"mine"))])
    assert rules(report) == [("ack-changed", "7:1")]
    assert "foreign" in report.violations[0].detail


def test_an_acknowledgement_with_an_unreadable_id_is_missing_and_shown_in_hex() -> None:
    report = check(two_owners(), [Ack(b"\x01\x02", 1, digest(b"x"))])
    assert rules(report) == [("ack-missing", "0102")]


def test_foreign_entries_are_counted_and_listed_not_fatal() -> None:
    log = two_owners()
    log[3:3] = [foreign(10), foreign(11, {"_t": "Insert", "_v": "x"}), foreign(12, {"k": "v"})]
    report = check(log)
    assert report.ok, report.summary()
    assert report.foreign == ["7:10", "7:11", "7:12"]
    assert (report.messages, report.decoded) == (9, 6)
    assert "foreign or undecodable (3): 7:10, 7:11, 7:12" in report.summary()


def test_the_summary_names_the_first_offending_ids_and_counts_rules() -> None:
    log = [first_tick(0, 100, 1), data(1, 99, 1, 0), data(2, 98, 1, 1), data(3, 120, 4, 2)]
    report = check(log)
    assert report.first_offending_ids == ["7:1", "7:2", "7:3"]
    text = report.summary()
    assert "first offending message ids: 7:1, 7:2, 7:3" in text
    assert "time-tick-order: 2" in text and "owner-start: 1" in text
    assert {v.rule for v in report.violations} <= set(RULES)


# ---- the command ----------------------------------------------------------------------


@pytest.fixture
def fake_topic(monkeypatch: pytest.MonkeyPatch) -> list[BackendMessage]:
    log: list[BackendMessage] = []

    def iter_topic(service_url: str, topic: str, **options: object) -> Iterator[BackendMessage]:
        assert topic == "persistent://public/default/chk"
        yield from log

    async def require_topic(admin: object, topic: str, channel: str) -> None:
        assert topic == "persistent://public/default/chk"  # the fake topic exists

    monkeypatch.setattr(streamwal.verify.cli, "iter_topic", iter_topic)
    monkeypatch.setattr(streamwal.verify.cli, "require_topic", require_topic)
    # the patched reader exists in this process only: read it here, not in a child
    monkeypatch.setattr(streamwal.verify.cli, "ReadingProcess", lambda: ReadingThread(iter_topic))
    return log


def test_verify_exits_zero_on_a_clean_log(
    fake_topic: list[BackendMessage], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_topic.extend(two_owners())
    acks = tmp_path / "acks.jsonl"
    write_acks(acks, [ack_of(fake_topic[1], 101)])
    assert main(["verify", "--channel", "chk", "--acks", str(acks)]) == 0
    out = capsys.readouterr().out
    assert "acknowledgements checked: 1" in out and out.rstrip().endswith("OK")


def test_verify_exits_one_and_names_the_offending_ids(
    fake_topic: list[BackendMessage], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_topic.extend([*two_owners(), data(6, 150, 1, 2), foreign(7)])
    acks = tmp_path / "acks.jsonl"
    write_acks(acks, [Ack(mid(42).to_bytes(), 5, digest(b"gone"))])
    assert main(["verify", "--channel", "chk", "--acks", str(acks)]) == 1
    out = capsys.readouterr().out
    assert "first offending message ids: 7:6, 7:42" in out
    assert "foreign or undecodable (1): 7:7" in out
    assert "VIOLATIONS FOUND" in out
    assert main(["verify", "--channel", "chk", "--acks", str(acks), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["first_offending_ids"] == ["7:6", "7:42"]
    assert [v["rule"] for v in report["violations"]] == [
        "time-tick-order",
        "stale-owner",
        "ack-missing",
    ]
    assert report["foreign"] == ["7:7"]


def test_verify_exits_two_when_the_acks_cannot_be_read(
    fake_topic: list[BackendMessage], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "acks.jsonl"
    bad.write_text("{not json\n")
    assert main(["verify", "--channel", "chk", "--acks", str(bad)]) == 2
    assert "not an acknowledgement" in capsys.readouterr().err


def test_violations_on_acknowledged_messages_are_counted_apart() -> None:
    log = [first_tick(0, 100, 1), data(1, 105, 1, 0), data(2, 103, 1, 1), data(3, 102, 1, 2)]
    unacked = check(log)
    assert len(unacked.violations) == 2 and unacked.acked_violations == 0
    acked = check(log, [ack_of(log[2], 103)])
    assert len(acked.violations) == 2 and acked.acked_violations == 1
    lost = check(log, [Ack(mid(50).to_bytes(), 1, digest(b"x"))])
    assert lost.acked_violations == 1
    assert "1 on acknowledged messages" in lost.summary()


def test_a_log_that_starts_at_its_truncation_point_is_not_missing_anything() -> None:
    log = two_owners()
    acks = [ack_of(e, tt) for e, tt in zip(log, (100, 101, 102, 200, 201, 202), strict=True)]
    # the broker has deleted entries 0-1; entry 2 is the first kept, inside node 1's
    # ownership, whose first time tick is gone
    kept = log[2:]
    plain = check(kept, acks[1:])
    assert ("owner-start", "7:2") in rules(plain)
    assert ("ack-missing", "7:1") in rules(plain)

    report = check_history(kept, PulsarMessageId.from_bytes, acks, truncated_before=mid(2))
    assert report.ok, report.summary()
    assert (report.acks_checked, report.acks_truncated) == (4, 2)
    assert report.owners == [(2, "7:3")]
    assert "2 before the truncation point 7:2" in report.summary()


def test_entries_before_the_truncation_point_are_not_read_but_a_gap_after_it_still_is() -> None:
    log = two_owners()
    acks = [ack_of(log[4], 201), Ack(mid(5).to_bytes(), 202, digest(payload_of(log[5])))]
    # still on disk before the point (not deleted yet): ignored, even a duplicate there
    dup = data(0, 90, 1, 0, payload=payload_of(log[5]))
    gapped = [dup, *log[1:5]]  # entry 5, acknowledged, is missing after the point
    report = check_history(gapped, PulsarMessageId.from_bytes, acks, truncated_before=mid(1))
    assert rules(report) == [("ack-missing", "7:5")]
    assert report.messages == 4


def test_failed_appends_are_counted_by_outcome_and_not_written_ones_must_be_absent() -> None:
    log = two_owners()
    landed, missing = digest(b"p2"), digest(b"never sent")
    failures = [
        Failure(landed, "unknown"),
        Failure(missing, "unknown"),
        Failure(missing, "not-written"),
    ]
    report = check_history(log, PulsarMessageId.from_bytes, [], failures)
    assert report.ok, report.summary()
    assert report.failures == {"unknown": 2, "not-written": 1}
    assert report.failures_in_log == {"unknown": 1}
    assert "1 not-written (0 in the log), 2 unknown (1 in the log)" in report.summary()
    wrong = check_history(log, PulsarMessageId.from_bytes, [], [Failure(landed, "not-written")])
    assert [v.rule for v in wrong.violations] == ["not-written-persisted"]
    assert wrong.failures_in_log == {"not-written": 1}


def test_an_append_answered_not_written_whose_earlier_try_landed_is_flagged() -> None:
    """An append whose first try landed (answer lost) and whose retry was refused
    before it reached a node must be answered unknown, never "not written"."""
    log = [first_tick(0, 100, 1), data(1, 101, 1, 0, b"b")]
    report = check_history(
        log, PulsarMessageId.from_bytes, [], [Failure(digest(b"b"), "not-written")]
    )
    assert rules(report) == [("not-written-persisted", digest(b"b")[:16])]
    told_unknown = [Failure(digest(b"b"), "unknown")]
    assert check_history(log, PulsarMessageId.from_bytes, [], told_unknown).ok


def _batch_log() -> list[BackendMessage]:
    """A batch of three (entries 2-4) between single appends (1 and 5)."""
    return [first_tick(0, 100, 1), *(data(i, 100 + i, 1, 0) for i in range(1, 6))]


def _digests(log: list[BackendMessage], *entries: int) -> list[str]:
    return [digest(payload_of(log[i])) for i in entries]


def test_a_batch_whose_messages_sit_together_in_order_passes() -> None:
    log = _batch_log()
    whole = _digests(log, 2, 3, 4)
    report = check_history(log, PulsarMessageId.from_bytes, batches=[whole])
    assert report.ok, report.summary()


def test_a_batch_that_failed_part_way_passes_with_what_landed_together() -> None:
    log = _batch_log()
    # the batch's last two messages never landed (they were answered with a failure)
    batch = [*_digests(log, 3, 4), digest(b"never landed"), digest(b"nor this")]
    report = check_history(log, PulsarMessageId.from_bytes, batches=[batch])
    assert report.ok, report.summary()


def test_another_append_between_a_batch_s_messages_is_a_split() -> None:
    log = _batch_log()
    report = check_history(log, PulsarMessageId.from_bytes, batches=[_digests(log, 2, 4)])
    assert rules(report) == [("batch-split", "7:4")]
    assert "batch-split" in RULES


def test_a_batch_out_of_its_order_in_the_log_is_a_split() -> None:
    log = _batch_log()
    report = check_history(log, PulsarMessageId.from_bytes, batches=[_digests(log, 3, 2, 4)])
    assert rules(report) == [("batch-split", "7:2")]


def _chunked(
    first_entry: int, tt: int, node: int, confirms: int, payload: bytes
) -> list[BackendMessage]:
    """The raw chunk records of one message, as the chunking layer writes them (a
    1 KiB entry limit, so a few KiB make several chunks)."""
    body, props = encode(
        MutableMessage(MessageType.INSERT, payload).stamped(tt, mid(confirms), node)
    )
    chunks = split(body, props, 1024)
    assert chunks is not None and len(chunks) >= 3
    return [BackendMessage(mid(first_entry + i), p, c) for i, (p, c) in enumerate(chunks)]


def _large_log() -> tuple[list[BackendMessage], bytes, bytes, int]:
    """Node 1 writes a whole chunked message (from entry 1) and starts another, cut
    after two chunks by node 2's takeover; node 2 appends a small one. The checker
    gets the log rebuilt, as ``verify`` hands it over; the cut message's first entry
    comes last."""
    whole, cut = bytes(range(256)) * 12, bytes(reversed(range(256))) * 12
    raw = [first_tick(0, 100, 1), *_chunked(1, 101, 1, 0, whole)]
    cut_at = len(raw)
    raw += _chunked(cut_at, 102, 1, 0, cut)[:2]
    raw += [first_tick(len(raw), 200, 2)]
    raw += [data(len(raw), 201, 2, len(raw) - 1)]
    return list(reassemble("ch", raw)), whole, cut, cut_at


def test_a_chunked_message_delivered_whole_passes_and_its_cut_one_is_never_in_the_log() -> None:
    log, whole, _, cut_at = _large_log()
    assert [m.message_id for m in log] == [mid(0), mid(1), mid(cut_at + 2), mid(cut_at + 3)]
    acks = [Ack(mid(1).to_bytes(), 101, digest(whole)), ack_of(log[3], 201)]
    handed = [Delivery(m.message_id.to_bytes(), digest(payload_of(m))) for m in log]
    report = check_history(log, PulsarMessageId.from_bytes, acks, deliveries=handed)
    assert report.ok, report.summary()
    assert (report.acks_checked, report.deliveries_checked) == (2, 4)


def test_part_of_a_cut_chunked_message_delivered_is_flagged() -> None:
    """A reader that hands over what it had of a sequence the takeover cut."""
    log, _, cut, cut_at = _large_log()
    handed = [Delivery(m.message_id.to_bytes(), digest(payload_of(m))) for m in log]
    handed.insert(2, Delivery(mid(cut_at).to_bytes(), digest(cut[:2048])))
    report = check_history(log, PulsarMessageId.from_bytes, deliveries=handed)
    assert rules(report) == [("delivered-changed", f"7:{cut_at}")]
    assert report.acked_violations == 0


def test_an_acknowledged_chunked_message_delivered_short_or_not_at_all_is_flagged() -> None:
    log, whole, _, _ = _large_log()
    acks = [Ack(mid(1).to_bytes(), 101, digest(whole))]
    short = [Delivery(mid(1).to_bytes(), digest(whole[:-1]))]
    report = check_history(log, PulsarMessageId.from_bytes, acks, deliveries=short)
    assert rules(report) == [("delivered-changed", "7:1")]
    assert report.acked_violations == 1
    dropped = check_history(log, PulsarMessageId.from_bytes, acks, deliveries=[])
    assert rules(dropped) == [("ack-undelivered", "7:1")]
    assert {"delivered-changed", "ack-undelivered"} <= set(RULES)
    # without a reader's deliveries the rules are not checked
    assert check_history(log, PulsarMessageId.from_bytes, acks).ok


def _handed(log: list[BackendMessage], *entries: int) -> list[Delivery]:
    return [Delivery(mid(e).to_bytes(), digest(payload_of(log[e]))) for e in entries]


def test_a_reader_handed_the_log_in_order_once_passes() -> None:
    log = two_owners()
    report = check_history(log, PulsarMessageId.from_bytes, deliveries=_handed(log, *range(6)))
    assert report.ok, report.summary()
    assert report.deliveries_checked == 6


def test_a_message_handed_twice_or_out_of_log_order_is_flagged() -> None:
    log = two_owners()
    twice = check_history(
        log, PulsarMessageId.from_bytes, deliveries=_handed(log, 0, 1, 2, 2, 3, 4, 5)
    )
    assert rules(twice) == [("delivered-out-of-order", "7:2")]
    swapped = check_history(
        log, PulsarMessageId.from_bytes, deliveries=_handed(log, 0, 1, 3, 2, 4, 5)
    )
    assert rules(swapped) == [("delivered-out-of-order", "7:2")]
    assert {"delivered-out-of-order", "delivered-skipped"} <= set(RULES)


def test_a_message_the_reader_skipped_is_flagged_even_if_nobody_acknowledged_it() -> None:
    log = two_owners()
    report = check_history(log, PulsarMessageId.from_bytes, deliveries=_handed(log, 0, 1, 3, 5))
    assert rules(report) == [("delivered-skipped", "7:2"), ("delivered-skipped", "7:4")]
    # a reader that stopped early skipped nothing between what it was handed
    assert check_history(log, PulsarMessageId.from_bytes, deliveries=_handed(log, 0, 1, 2)).ok
