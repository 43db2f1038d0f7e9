"""``streamwal bench exactly-once`` at minimal size: figures of both sides, well formed.

Nothing here is timed: the figures are only checked for shape and sign.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from streamwal.cli import main
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def test_idempotent_and_plain_appends_and_committed_transactions(
    stack: StackInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "bench", "exactly-once", "--json", "--concurrency", "1,4", "--seconds", "0.2",
        "--repeats", "1", "--out", str(tmp_path),
        "--pulsar-url", stack.pulsar_url, "--etcd", stack.etcd_endpoint,
    ]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["failed"] == {}
    result = doc["suites"]["exactly-once"]
    assert [c["concurrency"] for c in result["idempotent"]] == [1, 4]
    for cell in result["idempotent"]:
        for side in ("plain", "idempotent"):
            assert cell[side]["ops"] > 0 and _positive(cell[side]["per_s"])
        assert _positive(cell["throughput_ratio"])
    for cell in result["transactions"]:
        assert cell["committed"] > 0
        assert _positive(cell["committed_per_s"]) and _positive(cell["messages_per_s"])
        assert cell["commit"]["n"] == cell["committed"]
    (md_file,) = tmp_path.glob("bench-*-exactly-once.md")
    assert "committed txns/s" in md_file.read_text()
