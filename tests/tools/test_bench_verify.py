"""The verify suite at minimal size: well-formed figures and targets, nothing timed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.bench.targets import evaluate
from streamwal_lab.bench.verify import run_verify_bench
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.topics import list_topics
from tests.tools.test_bench_batches import _positive, _section

pytestmark = pytest.mark.integration


@pytest.fixture
async def target(stack: StackInfo) -> AsyncIterator[BenchTarget]:
    before = await list_topics(stack.pulsar_admin_url)
    yield BenchTarget(stack.pulsar_url, stack.etcd_endpoint, stack.pulsar_admin_url)
    after = await list_topics(stack.pulsar_admin_url)
    assert not {t for t in (after or set()) - (before or set()) if "bench-verify-" in t}


async def test_verify_reports_both_readers_memory_and_disk(target: BenchTarget) -> None:
    result = await run_verify_bench(target, messages=2000, repeats=1)
    # packed as a WAL writes batches: fewer entries than messages, every message verified
    assert 1 <= result["entries"] < 2000 and result["messages_verified"] >= 2001
    assert result["unpacked"]["entries"] == result["unpacked"]["messages_verified"] == 2001
    for figures in (result, result["unpacked"]):
        assert all(_positive(v) for v in figures["per_s"].values())
        assert _positive(figures["verify_vs_raw_ratio"]) and _positive(figures["entries_ratio"])
        assert _positive(figures["verify_peak_rss_mb"]) and _positive(figures["verify_work_mb"])
    assert {t.name for t in evaluate({"verify": result})} == {
        "verify/raw reader messages/s, packed channel (raw: entries)",
        "verify/raw reader messages/s, one message per entry",
        "verify peak RSS MB",
    }
    section = _section("verify", result)
    assert "packed: streamwal verify (child process; messages)" in section
    assert "one message per entry: raw Pulsar reader (no decoding; entries)" in section
