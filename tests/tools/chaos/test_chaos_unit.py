"""The chaos machinery without the stack: results, tables, the doc update, the runner's
bounds, the test clock, and the Pulsar channel's interleaving guard."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Awaitable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import _pulsar
import pytest

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.channel import PulsarBackendWAL
from streamwal.errors import ChannelFencedError, UnknownPositionError
from streamwal.verify.history import HistoryReport, Violation
from streamwal.wal.backend import AccessMode, settle_future
from streamwal_lab.chaos.cli import BEGIN, END, update_doc
from streamwal_lab.chaos.clock_node import OffsetFileClock
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult, failures_table, markdown_table, text_table
from streamwal_lab.chaos.runner import run_scenario
from streamwal_lab.chaos.scenarios import SCENARIOS, Scenario
from streamwal_lab.chaos.scenarios.common import KNOWN_FAULTS, RotatingFaults
from tests.adaptors.pulsar.fake_ids import FakeId


def test_a_result_absorbs_checker_reports_and_fails_on_violations_or_problems() -> None:
    result = ScenarioResult("x", rounds=2, faults=3)
    result.absorb("a", HistoryReport(messages=10, acks_checked=7, owners=[(1, "1:0")]))
    assert result.ok and (result.channels, result.acks_checked, result.messages) == (1, 7, 10)
    report = HistoryReport(messages=2, acks_checked=1, acked_violations=1)
    report.violations.append(Violation("ack-missing", "1:5", "gone"))
    result.absorb("b", report)
    assert not result.ok
    assert result.violations == ["b: [ack-missing] at 1:5: gone"]
    assert result.acked_violations == 1
    clean = ScenarioResult("y")
    clean.expect(True, "never")
    assert clean.ok
    clean.expect(False, "the fault did not bite")
    assert not clean.ok and clean.problems == ["the fault did not bite"]


def test_tables_show_one_row_per_scenario() -> None:
    rows = [ScenarioResult("alpha", rounds=5, faults=6, acks_checked=700, seconds=12.4)]
    rows.append(ScenarioResult("beta", violations=["c: [x] at 1:1: y"], problems=["p"]))
    text = text_table(rows).splitlines()
    assert text[0].split()[:2] == ["scenario", "rounds"] and len(text) == 4
    assert text[2].split()[:4] == ["alpha", "5", "6", "700"]
    md = markdown_table(rows).splitlines()
    assert md[0].startswith("| scenario | rounds | faults injected | acks checked |")
    assert md[2] == "| alpha | 5 | 6 | 700 | 0 | 0 | 0 | 0 | 12 |"
    assert md[3] == "| beta | 0 | 0 | 0 | 0 | 0 | 1 | 1 | 0 |"


def test_update_doc_replaces_only_the_marked_table(tmp_path: Path) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text(f"# Title\n\nbefore\n\n{BEGIN}\nold table\n{END}\n\nafter\n")
    update_doc(doc, [ScenarioResult("alpha", rounds=1)], "Run of today.")
    text = doc.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "old table" not in text and "| alpha | 1 |" in text and "Run of today." in text
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    with pytest.raises(ValueError, match="no"):
        update_doc(bare, [], "x")


def test_every_scenario_is_registered_with_bounded_rounds() -> None:
    assert set(SCENARIOS) == {
        "takeover-race",
        "kill-9-owner",
        "broker-restart",
        "etcd-restart",
        "tso-leader-kill",
        "clock-jump-back",
        "network-faults",
        "stock-broker",
        "checkpoints",
        "exactly-once",
        "batch-appends",
        "native-front",
        "client-retries",
        "large-messages",
        "read-only-reader",
        "cluster-kill-9",
        "cluster-pause",
        "cluster-zombie",
        "cluster-broker-lost",
        "cluster-etcd-restart",
        "cluster-brokers",
    }
    assert SCENARIOS["takeover-race"].rounds == 50
    assert SCENARIOS["takeover-race"].quick_rounds == 10
    for scenario in SCENARIOS.values():
        assert 1 <= scenario.quick_rounds <= scenario.rounds
        assert scenario.time_limit(scenario.rounds) < 30 * 60


async def test_the_runner_turns_a_crash_or_an_overrun_into_a_problem(tmp_path: Path) -> None:
    async def crash(env: ChaosEnv, rounds: int) -> ScenarioResult:
        raise RuntimeError("boom")

    async def hang(env: ChaosEnv, rounds: int) -> ScenarioResult:
        await asyncio.sleep(60)
        raise AssertionError("not reached")

    common: dict[str, Any] = {"pulsar_url": "pulsar://127.0.0.1:1", "etcd_endpoint": "x:1"}
    crashed = await run_scenario(
        Scenario("c", crash, 1, 1, 0.0, "crashes"), 1, workdir=tmp_path / "c", seed=1, **common
    )
    assert not crashed.ok and "boom" in crashed.problems[0]
    started = time.monotonic()
    hung = await run_scenario(
        Scenario("h", hang, 1, 1, 0.0, "hangs", base_seconds=0.2),
        1,
        workdir=tmp_path / "h",
        seed=1,
        **common,
    )
    assert time.monotonic() - started < 10
    assert not hung.ok and "did not finish within" in hung.problems[0]


def test_a_chaos_node_always_knows_its_brokers_admin_api(tmp_path: Path) -> None:
    """Without it the node cannot delete its probe topics: a node behind a fault proxy
    once left two on the shared broker per open."""
    env = ChaosEnv(
        tmp_path,
        "pulsar://127.0.0.1:30001",
        "127.0.0.1:2379",
        random.Random(1),
        admin_url="http://127.0.0.1:30002",
    )

    def admin_of(node_id: int, url: str, **pulsar: Any) -> Any:
        settings = {"pulsar": {"service_url": url, **pulsar}}
        return env.node(node_id, settings).config["pulsar"]["admin_url"]

    assert admin_of(1, env.pulsar_url) == "http://127.0.0.1:30002"
    private = SimpleNamespace(url="pulsar://127.0.0.1:30004", admin_url="http://127.0.0.1:30005")
    env._pulsars.append(private)  # type: ignore[arg-type]
    assert admin_of(6, private.url) == private.admin_url
    assert admin_of(2, "pulsar://127.0.0.1:16650") == "http://127.0.0.1:18080"
    assert admin_of(3, "pulsar://127.0.0.1:30003", admin_url=None) is None
    assert admin_of(4, "pulsar://127.0.0.1:30003", admin_url="http://x:1") == "http://x:1"
    with pytest.raises(ValueError, match=r"pulsar\.admin_url"):
        env.node(5, {"pulsar": {"service_url": "pulsar://127.0.0.1:30003"}})
    # without one of its own, the run's broker's is derived: a proxied node gets it too
    stack = ChaosEnv(tmp_path, "pulsar://127.0.0.1:16650", "127.0.0.1:2379", random.Random(1))
    assert stack.broker_admin_url == "http://127.0.0.1:18080"


def test_the_test_clock_follows_the_offset_file(tmp_path: Path) -> None:
    path = tmp_path / "clock.ms"
    clock = OffsetFileClock(path)
    now = time.time_ns() // 1_000_000
    assert abs(clock.wall_ms() - now) < 1000  # no file: no offset
    path.write_text("-30000")
    assert abs(clock.wall_ms() - (now - 30_000)) < 1000
    path.write_text("not a number")
    assert abs(clock.wall_ms() - (now - 30_000)) < 1000  # keeps the last good offset
    path.write_text("5000")
    assert abs(clock.wall_ms() - (now + 5000)) < 1000


async def test_an_entry_written_by_someone_else_between_ours_fences_this_owner() -> None:
    async def nothing() -> None:
        return None

    async def no_preparation(channel: str, topic: str, fence: Awaitable[None] | None) -> None:
        if fence is not None:
            await fence

    backend = PulsarBackendWAL(
        None,
        PulsarConfig(),
        "guard",
        AccessMode.READ_WRITE,
        nothing,
        prepare_topic=no_preparation,
    )
    loop = asyncio.get_running_loop()

    def answer(ledger: int, entry: int, batch: int = -1) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = loop.create_future()
        landed = FakeId(ledger, entry, batch)
        backend._state.complete(functools.partial(settle_future, future), _pulsar.Result.Ok, landed)
        return future

    assert str(answer(5, 10).result()) == "5:10"
    assert str(answer(5, 11, 0).result()) == "5:11:0"
    assert str(answer(5, 11, 1).result()) == "5:11:1"  # same batch entry
    assert str(answer(6, 0).result()) == "6:0"  # a new ledger (broker restart)
    with pytest.raises(UnknownPositionError):  # a receipt without a position
        answer(-1, -1, 0).result()
    assert str(answer(6, 1).result()) == "6:1"
    assert not backend.is_fenced
    gap = answer(6, 3)  # entry 6:2 is someone else's
    with pytest.raises(ChannelFencedError, match="another producer wrote between 6:1 and 6:3"):
        gap.result()
    assert backend.is_fenced
    after = answer(6, 4)  # persisted, but after the interleaving: never acknowledged
    with pytest.raises(ChannelFencedError):
        after.result()
    failed: asyncio.Future[Any] = loop.create_future()
    backend._state.complete(functools.partial(settle_future, failed), _pulsar.Result.Timeout, None)
    with pytest.raises(ChannelFencedError):
        failed.result()


def test_the_failures_table_shows_each_kind_and_how_many_are_in_the_log() -> None:
    row = ScenarioResult("alpha", not_written=7, unknown=3, unknown_in_log=2)
    table = failures_table([row]).splitlines()
    assert table[0].startswith("| scenario | failed appends | answered not written |")
    assert table[2] == "| alpha | 10 | 7 | 0 | 3 | 2 |"


def test_rotating_faults_refuse_a_fault_they_do_not_know() -> None:
    """A typo would otherwise run as a takeover and restart, silently."""
    result = ScenarioResult("x")
    with pytest.raises(ValueError, match="kill-fornt"):
        RotatingFaults(result, [], [], "c", ("takeover", "kill-fornt"))
    with pytest.raises(ValueError, match="none"):
        RotatingFaults(result, [], [], "c", ())
    assert RotatingFaults(result, [], [], "c", KNOWN_FAULTS).movers == []
