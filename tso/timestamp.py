"""Hybrid timestamps: physical milliseconds shifted left by 18 bits, OR a logical counter.

Ordering the integers orders the events: a later physical millisecond always wins,
and within one millisecond the logical counter breaks ties (up to ``MAX_LOGICAL - 1``
timestamps per millisecond). The physical part is Unix time in milliseconds, shown
in UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from streamwal.errors import InvalidInputError

__all__ = [
    "LOGICAL_BITS",
    "MAX_LOGICAL",
    "MAX_TIMESTAMP",
    "HybridTimestamp",
    "compose",
    "format_timestamp",
    "parse_timestamp",
    "physical_datetime",
    "split",
]

LOGICAL_BITS = 18
MAX_LOGICAL = 1 << LOGICAL_BITS
"""Logical counters live in ``[0, MAX_LOGICAL)``."""
MAX_TIMESTAMP = (1 << 64) - 1
"""Timestamps are unsigned 64-bit integers (the gRPC and WAL wire type)."""
_LOGICAL_MASK = MAX_LOGICAL - 1
_MAX_PHYSICAL = MAX_TIMESTAMP >> LOGICAL_BITS


def compose(physical_ms: int, logical: int) -> int:
    """The timestamp of ``logical`` within Unix millisecond ``physical_ms``.

    Raises :class:`InvalidInputError` when either part is out of range.
    """
    if not 0 <= physical_ms <= _MAX_PHYSICAL:
        raise InvalidInputError(f"physical_ms out of range: {physical_ms}")
    if not 0 <= logical < MAX_LOGICAL:
        raise InvalidInputError(f"logical out of range [0, {MAX_LOGICAL}): {logical}")
    return (physical_ms << LOGICAL_BITS) | logical


def split(ts: int) -> tuple[int, int]:
    """``(physical_ms, logical)`` of ``ts``; raises :class:`InvalidInputError` if not a uint64."""
    _check(ts)
    return ts >> LOGICAL_BITS, ts & _LOGICAL_MASK


def physical_datetime(ts: int) -> datetime:
    """The physical part of ``ts`` as an aware UTC datetime (millisecond precision)."""
    physical_ms, _ = split(ts)
    try:
        return datetime.fromtimestamp(physical_ms / 1000.0, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise InvalidInputError(f"physical part of {ts} is not a representable time") from exc


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_timestamp(ts: int) -> str:
    """``"<ts> (<UTC ISO time>, logical <n>)"``, for logs and the CLI."""
    _, logical = split(ts)
    return f"{ts} ({_iso(physical_datetime(ts))}, logical {logical})"


def parse_timestamp(text: str) -> int:
    """A timestamp from decimal or ``0x`` hex text; raises :class:`InvalidInputError`."""
    raw = text.strip().replace("_", "")
    try:
        value = int(raw, 16) if raw.lower().startswith("0x") else int(raw, 10)
    except ValueError as exc:
        raise InvalidInputError(f"not a timestamp: {text!r}") from exc
    _check(value)
    return value


def _check(ts: int) -> None:
    if not 0 <= ts <= MAX_TIMESTAMP:
        raise InvalidInputError(f"timestamp out of uint64 range: {ts}")


@dataclass(frozen=True)
class HybridTimestamp:
    """A decoded timestamp: what ``streamwal tso parse`` prints."""

    timestamp: int
    physical_ms: int
    logical: int

    @classmethod
    def of(cls, ts: int) -> HybridTimestamp:
        physical_ms, logical = split(ts)
        return cls(timestamp=ts, physical_ms=physical_ms, logical=logical)

    @property
    def physical(self) -> datetime:
        return physical_datetime(self.timestamp)

    @property
    def physical_iso(self) -> str:
        """The physical part as an ISO 8601 UTC time with a ``Z`` suffix."""
        return _iso(self.physical)

    def as_dict(self) -> dict[str, int | str]:
        return {
            "timestamp": self.timestamp,
            "physical_ms": self.physical_ms,
            "physical": self.physical_iso,
            "logical": self.logical,
        }
