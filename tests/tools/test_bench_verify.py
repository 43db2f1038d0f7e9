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
    assert result["entries"] == 2001
    assert all(_positive(v) for v in result["per_s"].values())
    assert _positive(result["verify_vs_raw_ratio"])
    assert _positive(result["verify_peak_rss_mb"]) and _positive(result["verify_work_mb"])
    assert {t.name for t in evaluate({"verify": result})} == {
        "verify/raw reader messages/s",
        "verify peak RSS MB",
    }
    assert "streamwal verify (child process)" in _section("verify", result)
