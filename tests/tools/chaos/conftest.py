"""Chaos tests run fault scenarios on the real stack with few rounds.

The full runs (the round counts ``streamwal chaos`` reports) are marked ``slow`` and
skipped unless the environment sets ``STREAMWAL_SLOW=1``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SLOW_ENV = "STREAMWAL_SLOW"
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(SLOW_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"long scenario run: set {SLOW_ENV}=1 to run it")
    for item in items:
        if "slow" in item.keywords and _HERE in Path(str(item.path)).parents:
            item.add_marker(skip)
