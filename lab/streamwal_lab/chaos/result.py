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

from streamwal.errors import WriteOutcome
from streamwal.verify.history import HistoryReport

__all__ = ["ScenarioResult", "failures_table", "markdown_table", "text_table"]


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
    not_written: int = 0
    """Failed appends answered "not written"..."""
    not_written_in_log: int = 0
    """... and how many of them are in the log anyway (must be none)."""
    unknown: int = 0
    """Failed appends answered "outcome unknown"..."""
    unknown_in_log: int = 0
    """... and how many of them are in the log."""
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
        self.ownerships += max(report.owners_count, len(report.owners))
        self.foreign += max(report.foreign_count, len(report.foreign))
        self.violations.extend(f"{channel}: {v}" for v in report.violations)
        self.acked_violations += report.acked_violations
        not_written, unknown = WriteOutcome.NOT_WRITTEN.value, WriteOutcome.UNKNOWN.value
        self.not_written += report.failures.get(not_written, 0)
        self.not_written_in_log += report.failures_in_log.get(not_written, 0)
        self.unknown += report.failures.get(unknown, 0)
        self.unknown_in_log += report.failures_in_log.get(unknown, 0)

    @property
    def failed(self) -> int:
        return self.not_written + self.unknown

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
    ("violations", "violations"),
    ("problems", "problems"),
    ("seconds", "seconds"),
)


_FAILURE_COLUMNS = (
    ("scenario", "name"),
    ("failed appends", "failed"),
    ("answered not written", "not_written"),
    ("of them in the log", "not_written_in_log"),
    ("answered unknown", "unknown"),
    ("of them in the log", "unknown_in_log"),
)


def _cells(result: ScenarioResult, columns: Sequence[tuple[str, str]] = _COLUMNS) -> list[str]:
    cells = []
    for _, attr in columns:
        value = getattr(result, attr)
        if isinstance(value, list):
            value = len(value)
        elif isinstance(value, float):
            value = f"{value:.0f}"
        cells.append(str(value))
    return cells


def text_table(results: Sequence[ScenarioResult], *, failures: bool = False) -> str:
    """A fixed-width table for a terminal, one row per scenario (``failures``: the
    failed appends by outcome, as :func:`failures_table`)."""
    columns = _FAILURE_COLUMNS if failures else _COLUMNS
    header = [title for title, _ in columns]
    rows = [header, *(_cells(r, columns) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(
    results: Iterable[ScenarioResult], columns: Sequence[tuple[str, str]] = _COLUMNS
) -> str:
    """The same table in Markdown (what ``docs/reliability.md`` shows)."""
    header = [title for title, _ in columns]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(_cells(r, columns)) + " |" for r in results]
    return "\n".join(lines)


def failures_table(results: Iterable[ScenarioResult]) -> str:
    """Failed appends by what the answer said of the log, and how many of each kind
    the checker found in the log anyway (answered not written: must be none)."""
    return markdown_table(results, _FAILURE_COLUMNS)
