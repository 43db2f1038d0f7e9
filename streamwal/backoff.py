"""``Backoff``: the one exponential retry schedule of the product.

It sits at the package root, beside the errors, so that the WAL, the TSO, the node's
client and the cluster client share it without importing each other. A WAL's
``WALConfig`` holds three of them (``streamwal.wal.config`` re-exports the class); the
clients build theirs from their own settings. A loop runs on it through
:class:`streamwal.retry.Retry`, which takes the waits from :meth:`Backoff.delays` and
applies the loop's bounds: a number of attempts (``max_attempts``, or a caller's
``retries``), a deadline, the errors worth another try.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from streamwal.errors import ConfigError

__all__ = ["Backoff", "check_positive"]


def check_positive(name: str, value: float) -> None:
    """:class:`~streamwal.errors.ConfigError` naming ``name`` unless ``value`` is a
    finite number above zero."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(name, f"must be a finite number, got {value!r}")
    if value <= 0:
        raise ConfigError(name, f"must be > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Backoff:
    """An exponential schedule: ``initial``, then x ``multiplier`` each time, capped at ``maximum``.

    Seconds throughout. ``max_attempts`` bounds the attempts of a loop that uses it
    (``None``: until success or cancellation).
    """

    #: the first delay, seconds
    initial: float
    #: the longest delay, seconds
    maximum: float
    #: each delay is the previous one times this
    multiplier: float = 2.0
    #: attempts at most; null: until success or cancellation
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        check_positive("initial", self.initial)
        check_positive("maximum", self.maximum)
        check_positive("multiplier", self.multiplier)
        if self.maximum < self.initial:
            raise ConfigError("maximum", f"must be >= initial ({self.maximum} < {self.initial})")
        if self.multiplier < 1:
            raise ConfigError("multiplier", f"must be >= 1, got {self.multiplier}")
        if self.max_attempts is not None and (
            not isinstance(self.max_attempts, int) or self.max_attempts < 1
        ):
            raise ConfigError("max_attempts", f"must be >= 1 or None, got {self.max_attempts!r}")

    def delays(self) -> Iterator[float]:
        """The waits between attempts: initial, initial*m, ... capped at maximum, forever."""
        delay = self.initial
        while True:
            yield delay
            delay = min(delay * self.multiplier, self.maximum)
