"""The Pulsar backend refuses a pulsar-client it was not tested with."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from streamwal.adaptors.pulsar import PulsarOpener, client_check
from streamwal.adaptors.pulsar.client_check import TESTED, check_client
from streamwal.errors import MisconfiguredError

ROOT = Path(__file__).resolve().parents[3]


def test_the_installed_client_is_a_tested_one() -> None:
    check_client()


@pytest.mark.parametrize("installed", ["3.12.0", "4.0.0", "unknown"])
def test_an_untested_client_stops_with_a_clear_message(installed: str) -> None:
    with pytest.raises(MisconfiguredError, match=r"not a version streamwal was tested with"):
        check_client(installed)


async def test_the_opener_checks_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_check, "_checked", False)
    monkeypatch.setattr(client_check, "version", lambda _name: "3.1.0")
    with pytest.raises(MisconfiguredError, match=r"3\.1\.0"):
        await PulsarOpener().start()


def test_the_dependency_range_is_the_tested_one() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if d.startswith("pulsar-client")]
    low = re.search(r">=\s*(\d+)\.(\d+)", spec)
    high = re.search(r"<\s*(\d+)\.(\d+)", spec)
    assert low and high, spec
    assert (int(low[1]), int(low[2])) == TESTED[0]
    assert (int(high[1]), int(high[2])) == (TESTED[-1][0], TESTED[-1][1] + 1)
