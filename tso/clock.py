"""Clocks the oracle reads: a wall clock for physical time and a monotonic one for leases.

The oracle never trusts the wall clock to move forward; leases are measured only on
the monotonic clock, so a wall-clock jump can neither extend nor shorten leadership.
:class:`ManualClock` lets tests put the wall clock behind or jump it back.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    def wall_ms(self) -> int:
        """Unix time in milliseconds; may jump in either direction."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (lease deadlines)."""
        ...


class SystemClock:
    """The machine's clocks."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock under a test's control; one event loop, not thread-safe.

    The wall clock follows the system clock shifted by ``offset_ms`` (negative: set
    behind), or stays still once frozen. :meth:`shift` jumps it either way. The
    monotonic clock follows the system's and can only be moved forward.
    """

    def __init__(self, offset_ms: int = 0, *, frozen_at_ms: int | None = None) -> None:
        self.offset_ms = offset_ms
        self._frozen_at_ms = frozen_at_ms
        self._monotonic_offset_s = 0.0

    def wall_ms(self) -> int:
        base = self._frozen_at_ms if self._frozen_at_ms is not None else time.time_ns() // 1_000_000
        return base + self.offset_ms

    def monotonic(self) -> float:
        return time.monotonic() + self._monotonic_offset_s

    def shift(self, delta_ms: int) -> None:
        """Jump the wall clock by ``delta_ms`` (negative: back in time)."""
        self.offset_ms += delta_ms

    def freeze(self, at_ms: int | None = None) -> None:
        """Stop the wall clock at ``at_ms`` (default: its current reading)."""
        now = self.wall_ms()
        self._frozen_at_ms = now if at_ms is None else at_ms
        self.offset_ms = 0

    def unfreeze(self) -> None:
        """Let the wall clock tick again from where it stands."""
        if self._frozen_at_ms is not None:
            now = self.wall_ms()
            self._frozen_at_ms = None
            self.offset_ms = now - time.time_ns() // 1_000_000

    def advance_monotonic(self, seconds: float) -> None:
        """Move the monotonic clock forward, so lease deadlines pass without waiting."""
        if seconds < 0:
            raise ValueError("the monotonic clock never goes back")
        self._monotonic_offset_s += seconds
