"""Types for command-line numbers: a count or a duration that cannot be meant.

A negative ``--timeout``, a ``--limit`` of -5 or a ``--seconds nan`` is a typo.
Taken as given, it runs: a drain that times out at once, a listing sliced from its
end, a benchmark with nothing in it, each answered with success. These types refuse
it before anything runs, with argparse's usage error (exit code 2).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

__all__ = ["count", "count_or_zero", "number", "seconds", "seconds_or_zero"]

_N = TypeVar("_N", int, float)


def number(cast: Callable[[str], _N], *, zero: bool = False) -> Callable[[str], _N]:
    """An argparse ``type``: a finite number above 0 (``zero``: 0 or above)."""
    least = "0 or more" if zero else "above 0"
    kind = "a whole number" if cast is int else "a number"

    def parse(text: str) -> _N:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"need {kind} {least}, got {text!r}")
        return value

    return parse


#: how many of something, at least one
count = number(int)
#: how many, where 0 means none of it
count_or_zero = number(int, zero=True)
#: a duration in seconds, above 0
seconds = number(float)
#: a duration in seconds, where 0 means none
seconds_or_zero = number(float, zero=True)
