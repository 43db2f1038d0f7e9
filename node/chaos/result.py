"""What one scenario run found, and the table the ``chaos`` command prints and writes.

``violations`` are what the history checker found in the logs (the safety claims:
nothing acknowledged lost or changed, one writer at a time, time ticks never back).
``problems`` are the scenario's own expectations that did not hold (a fault that was
not injected, an open that did not retry, an unexpected status code, appends that
never resumed): they make the run fail as well, but are reported apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from node.history_check import HistoryReport

__all__ = ["ScenarioResult", "markdown_table", "text_table"]


@dataclass
class ScenarioResult:
    name: str
    rounds: int = 0
    faults: int = 0
    acks_checked: int = 0
    messages: int = 0
    channels: int = 0
    ownerships: int = 0
    foreign: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    acked_violations: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    """Failed appends by outcome ("not-written", "unknown")."""
    failures_in_log: dict[str, int] = field(default_factory=dict)
    """Of those, the ones in the log anyway, by outcome."""
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.problems

    def absorb(self, channel: str, report: HistoryReport) -> None:
        """Add one channel's checker report."""
        self.channels += 1
        self.acks_checked += report.acks_checked
        self.messages += report.messages
        self.ownerships += len(report.owners)
        self.foreign += len(report.foreign)
        self.violations.extend(f"{channel}: {v}" for v in report.violations)
        self.acked_violations += report.acked_violations
        for kind, count in report.failures.items():
            self.failures[kind] = self.failures.get(kind, 0) + count
        for kind, count in report.failures_in_log.items():
            self.failures_in_log[kind] = self.failures_in_log.get(kind, 0) + count

    def failed(self, kind: str) -> str:
        """``"N (M)"``: appends failed with outcome ``kind``, M of them in the log."""
        return f"{self.failures.get(kind, 0)} ({self.failures_in_log.get(kind, 0)})"

    @property
    def failed_not_written(self) -> str:
        return self.failed("not-written")

    @property
    def failed_unknown(self) -> str:
        return self.failed("unknown")

    def expect(self, condition: bool, problem: str) -> None:
        """Record ``problem`` unless ``condition`` holds."""
        if not condition:
            self.problems.append(problem)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, default=str)


_COLUMNS = (
    ("scenario", "name"),
    ("rounds", "rounds"),
    ("faults injected", "faults"),
    ("acks checked", "acks_checked"),
    ("messages read", "messages"),
    ("ownerships", "ownerships"),
    ("failed: not written (in log)", "failed_not_written"),
    ("failed: unknown (in log)", "failed_unknown"),
    ("violations", "violations"),
    ("problems", "problems"),
    ("seconds", "seconds"),
)


def _cells(result: ScenarioResult) -> list[str]:
    cells = []
    for _, attr in _COLUMNS:
        value = getattr(result, attr)
        if isinstance(value, list):
            value = len(value)
        elif isinstance(value, float):
            value = f"{value:.0f}"
        cells.append(str(value))
    return cells


def text_table(results: Sequence[ScenarioResult]) -> str:
    """A fixed-width table for a terminal, one row per scenario."""
    header = [title for title, _ in _COLUMNS]
    rows = [header, *(_cells(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(results: Iterable[ScenarioResult]) -> str:
    """The same table in Markdown (what ``docs/reliability.md`` shows)."""
    header = [title for title, _ in _COLUMNS]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in results]
    return "\n".join(lines)
