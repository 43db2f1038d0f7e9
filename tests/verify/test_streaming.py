"""The streaming checker: bounded memory, checkpoints across a boundary, where a read
starts, and the command's bad inputs."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import streamwal.verify.cli
from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.cli import main
from streamwal.errors import InvalidInputError
from streamwal.verify.acks import digest, write_acks
from streamwal.verify.cli import parse_message_id, parse_since
from streamwal.verify.history import HistoryChecker, check_history
from streamwal.verify.pipeline import ReadingThread
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message import MessageType, MutableMessage, encode
from streamwal.wal.message.codec_v1 import KEY_TIME_TICK
from tests.verify.test_history import ack_of, data, first_tick, mid

TOPIC = "persistent://public/default/chk"


class FakeTopic:
    """A topic the command reads through a patched :func:`iter_topic` that honours
    where a read starts, as the real reader does."""

    def __init__(self) -> None:
        self.log: list[BackendMessage] = []
        self.starts: list[tuple[PulsarMessageId | None, bool]] = []

    def iter_topic(self, service_url: str, topic: str, **options: Any) -> Iterator[BackendMessage]:
        assert topic == TOPIC
        start: PulsarMessageId | None = options.get("start")
        inclusive = bool(options.get("inclusive"))
        self.starts.append((start, inclusive))
        for entry in self.log:
            if start is not None and (
                entry.message_id < start or (not inclusive and entry.message_id == start)
            ):
                continue
            yield entry


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> FakeTopic:
    fake = FakeTopic()

    async def require_topic(admin: object, topic: str, channel: str) -> None:
        assert topic == TOPIC

    monkeypatch.setattr(streamwal.verify.cli, "iter_topic", fake.iter_topic)
    monkeypatch.setattr(streamwal.verify.cli, "require_topic", require_topic)
    # the patched reader exists in this process only: read it here, not in a child
    monkeypatch.setattr(
        streamwal.verify.cli, "ReadingProcess", lambda: ReadingThread(fake.iter_topic)
    )
    return fake


def verify_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["verify", "--channel", "chk", "--json", "--no-progress", *args])
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else {})


# ---- checkpoints ----------------------------------------------------------------------


def test_a_checkpoint_carries_a_time_tick_regression_across_the_boundary(
    topic: FakeTopic, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "chk.state"
    topic.log += [first_tick(0, 100, 1), data(1, 105, 1, 0)]
    code, first = verify_json(capsys, "--state", str(state))
    assert code == 0 and first["messages"] == 2 and first["last_id"] == "7:1"
    assert state.exists() and (tmp_path / "chk.state.db").exists()
    # right after the boundary the time tick goes back: only the carried last tick sees it
    topic.log += [data(2, 103, 1, 1), data(3, 106, 1, 2)]
    code, second = verify_json(capsys, "--state", str(state))
    assert code == 1
    assert second["messages"] == 2 and second["resumed_after"] == "7:1"
    assert [(v["rule"], v["message_id"]) for v in second["violations"]] == [
        ("time-tick-order", "7:2")
    ]
    assert topic.starts[-1] == (mid(1), False)  # after the last id read, not at it
    # the next run reports what it read: nothing new, nothing broken
    code, third = verify_json(capsys, "--state", str(state))
    assert code == 0 and third["messages"] == 0


def test_a_checkpoint_finds_a_payload_persisted_on_both_sides_of_the_boundary(
    topic: FakeTopic, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "chk.state"
    topic.log += [first_tick(0, 100, 1), data(1, 101, 1, 0, payload=b"once")]
    assert verify_json(capsys, "--state", str(state))[0] == 0
    topic.log += [data(2, 102, 1, 1, payload=b"once"), data(3, 103, 1, 2)]
    acks = tmp_path / "acks.jsonl"
    write_acks(acks, [ack_of(topic.log[1], 101)])  # acknowledged before the boundary
    code, report = verify_json(capsys, "--state", str(state), "--acks", str(acks))
    assert code == 1
    assert [(v["rule"], v["message_id"]) for v in report["violations"]] == [
        ("ack-duplicated", "7:1")
    ]
    assert report["acks_checked"] == 1


def test_a_checkpoint_keeps_the_ownership_and_an_idempotent_sequence(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    stamped = MutableMessage(MessageType.INSERT, b"a").with_producer(9, 1).stamped(101, mid(0), 1)
    body, props = encode(stamped)
    with HistoryChecker(PulsarMessageId.from_bytes, store=store) as before:
        for raw in (first_tick(0, 100, 1), BackendMessage(mid(1), body, props)):
            before.feed(raw)
        before.finish()
        state = json.loads(json.dumps(before.state()))
    again = encode(
        MutableMessage(MessageType.INSERT, b"b").with_producer(9, 1).stamped(103, mid(0), 1)
    )
    with HistoryChecker(PulsarMessageId.from_bytes, store=store) as after:
        after.restore(state)
        after.feed(data(2, 102, 2, 0))  # node 2 never took over: not the owner
        after.feed(BackendMessage(mid(3), *again))  # the same sequence again
        report = after.finish()
    assert [(v.rule, v.message_id) for v in report.violations] == [
        ("owner-start", "7:2"),
        ("idempotent-duplicated", "7:3"),
    ]
    assert "already at 7:1" in report.violations[1].detail


def test_a_run_that_never_saved_its_checkpoint_leaves_nothing_behind(tmp_path: Path) -> None:
    """Killed after reading, before saving: the next run reads those entries again, and
    what the killed run stored of them counts neither as copies nor as violations."""
    store = tmp_path / "s.db"
    with HistoryChecker(PulsarMessageId.from_bytes, store=store) as first:
        first.feed(first_tick(0, 100, 1))
        first.finish()
        state = first.state()
    read_again = [data(1, 101, 1, 0, payload=b"x"), data(2, 99, 1, 1)]
    with HistoryChecker(PulsarMessageId.from_bytes, store=store) as killed:
        killed.restore(state)
        for raw in read_again:
            killed.feed(raw)
        killed.finish()  # its violations stored; then it dies before saving
    with HistoryChecker(PulsarMessageId.from_bytes, store=store) as again:
        again.restore(state)
        again.feed(read_again[0])
        report = again.finish(acks=[ack_of(read_again[0], 101)])
    assert report.ok, report.summary()
    assert (report.messages, report.acks_checked) == (1, 1)


def test_a_bad_checkpoint_is_refused(
    topic: FakeTopic, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic.log += [first_tick(0, 100, 1)]
    garbage = tmp_path / "garbage.state"
    garbage.write_text("{not json")
    assert main(["verify", "--channel", "chk", "--state", str(garbage)]) == 2
    assert "not a verify checkpoint" in capsys.readouterr().err
    other = tmp_path / "other.state"
    other.write_text(json.dumps({"topic": "persistent://public/default/else"}))
    assert main(["verify", "--channel", "chk", "--state", str(other)]) == 2
    assert "not of 'persistent://public/default/chk'" in capsys.readouterr().err
    lost = tmp_path / "lost.state"
    lost.write_text(json.dumps({"topic": TOPIC}))
    assert main(["verify", "--channel", "chk", "--state", str(lost)]) == 2
    assert "are missing" in capsys.readouterr().err
    with HistoryChecker(PulsarMessageId.from_bytes) as checker, pytest.raises(InvalidInputError):
        checker.restore({"version": 1, "run": "x"})


# ---- where a read starts --------------------------------------------------------------


def test_from_starts_at_the_id_given(
    topic: FakeTopic, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic.log += [first_tick(0, 100, 1), data(1, 101, 1, 0), data(2, 99, 1, 1), data(3, 102, 1, 2)]
    # an acknowledgement before the start is not missing: it is not what was read
    acks = tmp_path / "acks.jsonl"
    write_acks(acks, [ack_of(topic.log[1], 101), ack_of(topic.log[3], 102)])
    code, report = verify_json(capsys, "--from", "7:3", "--acks", str(acks))
    assert topic.starts == [(mid(3), True)]
    # the regression at 7:2 is before it; 7:3 continues node 1's ownership
    assert code == 0 and report["messages"] == 1, report
    assert report["started_at"] == "7:3"
    assert (report["acks_checked"], report["acks_truncated"]) == (1, 1)
    code, report = verify_json(capsys, "--from", "(7,1,-1,-1)")
    assert code == 1 and report["messages"] == 3
    assert [v["rule"] for v in report["violations"]] == ["time-tick-order"]


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("--from", "7:x", "not a message id"),
        ("--from", "1:2:3:4:5", "not a message id"),
        ("--since", "yesterday", "not a time"),
        ("--since", "-10y", "not a time"),
    ],
)
def test_a_bad_start_exits_two(
    topic: FakeTopic, capsys: pytest.CaptureFixture[str], option: str, value: str, error: str
) -> None:
    assert main(["verify", "--channel", "chk", f"{option}={value}"]) == 2
    assert error in capsys.readouterr().err
    assert topic.starts == []  # refused before anything is read


def test_from_and_since_do_not_mix_with_a_checkpoint(
    topic: FakeTopic, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "chk.state"
    topic.log += [first_tick(0, 100, 1)]
    assert verify_json(capsys, "--state", str(state))[0] == 0
    assert main(["verify", "--channel", "chk", "--state", str(state), "--from", "7:0"]) == 2
    assert "not with a checkpoint" in capsys.readouterr().err


def test_message_ids_and_times_are_read_as_operators_write_them() -> None:
    expected = PulsarMessageId(123, 45)
    assert parse_message_id("123:45") == expected
    assert parse_message_id("123:45:-1:-1") == expected
    assert parse_message_id("(123,45,-1,-1)") == expected
    assert parse_message_id(expected.to_bytes().hex()) == expected
    assert parse_message_id("123:45:2") == PulsarMessageId(123, 45, 2)
    assert parse_since("-10m", now=1000.0) == 400_000
    assert parse_since("-1.5h", now=10_000.0) == 4_600_000
    assert parse_since("2026-01-01T00:00:00Z") == 1_767_225_600_000
    assert parse_since("2026-01-01T00:00:00") == 1_767_225_600_000  # UTC unless it says
    assert parse_since("2026-01-01T01:00:00+01:00") == 1_767_225_600_000


def test_the_progress_line_is_written_and_cleared(
    topic: FakeTopic, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streamwal.verify.cli, "_PROGRESS_EVERY_S", 0.0)
    topic.log += [first_tick(0, 100, 1), *(data(i, 100 + i, 1, 0) for i in range(1, 2100))]
    assert main(["verify", "--channel", "chk", "--progress"]) == 0
    err = capsys.readouterr().err
    # a line per batch of the reading side (BATCH entries)
    assert "\rverify: 1,000 messages" in err and "msg/s, at 7:999" in err
    assert "\rverify: 2,100 messages" in err
    assert err.endswith("\r")  # cleared at the end
    assert main(["verify", "--channel", "chk", "--no-progress"]) == 0
    assert "msg/s" not in capsys.readouterr().err


# ---- bounded memory -------------------------------------------------------------------


def _synthetic(count: int) -> Iterator[BackendMessage]:
    """A first time tick, then ``count`` inserts of 256 B confirming it, made one at a
    time (the way a reader hands them over)."""
    yield first_tick(0, 1000, 1)
    _, props = encode(
        MutableMessage(MessageType.INSERT, b"").stamped(1000, mid(0), 1), log_format=1
    )  # format v1: a time tick per entry is one property to change
    filler = b"v" * 244
    for i in range(1, count + 1):
        entry = dict(props)
        entry[KEY_TIME_TICK] = str(1000 + i)
        yield BackendMessage(mid(i), b"%012d" % i + filler, entry)


def test_the_checker_s_memory_does_not_grow_with_the_log(tmp_path: Path) -> None:
    """200,000 messages: the checker keeps none of them. A list of every decoded message
    (what the checker kept before it streamed) would take far more than the bound: one
    ImmutableMessage with its payload and properties is over 1 KB."""
    count = 200_000
    sample = [m for _, m in zip(range(1000), _synthetic(1000), strict=False)]
    tracemalloc.start()
    try:
        from streamwal.wal.message import decode

        kept = [decode(m, PulsarMessageId.from_bytes) for m in _synthetic(len(sample))]
        per_message, _ = tracemalloc.get_traced_memory()
        del kept
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        acks = [ack_of(sample[5], 1005)]
        report = check_history(
            _synthetic(count), PulsarMessageId.from_bytes, acks, work_dir=tmp_path
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok, report.summary()
    assert report.messages == count + 1 and report.acks_checked == 1
    assert report.work_bytes > 0
    bound = 20 * 1024 * 1024
    list_based = per_message / len(sample) * count
    assert list_based > 5 * bound, list_based  # a list of the decoded log alone
    assert peak - base < bound, f"peak {(peak - base) / 1e6:.1f} MB, list {list_based / 1e6:.1f}"
    assert list(tmp_path.iterdir()) == []  # the temporary store is gone
    assert digest(sample[5].payload) == acks[0].digest
