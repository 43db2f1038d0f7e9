"""A broker restarted on old data is watched for the bookie it cannot find.

The lines below are from a shared stack's broker output after a restart on three
hours of data, when every test that created a ledger failed with "Not enough
non-faulty bookies available"; the clean lines from a restart that went well.
No broker runs here: the chaos broker-restart scenario restarts real ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamwal_lab.stack import StackPaths
from streamwal_lab.stack import pulsar as pulsar_module
from streamwal_lab.stack.pulsar import PulsarService, bookie_lost

_LOST_RESOLVE = (
    "2026-12-01T13:28:52,038 - ERROR - [BookKeeperClientScheduler-OrderedScheduler-0-0:"
    "PerChannelBookieClient@527] - Cannot connect to 127.0.0.1:36467 as endpoint "
    "resolution failed (probably bookie is down) err org.apache.bookkeeper.proto."
    "BookieAddressResolver$BookieIdNotResolvedException: Cannot resolve bookieId "
    "127.0.0.1:36467, bookie does not exist or it is not running\n"
)
_LOST_PLACEMENT = (
    "2026-12-01T13:28:53,475 - WARN  - [BookKeeperClientWorker-OrderedExecutor-0-0:"
    "RackawareEnsemblePlacementPolicyImpl@848] - Failed to find 1 bookies : "
    "excludeBookies [], allBookies [].\n"
)
_CLEAN = (
    "2026-12-01T18:43:35,070 - WARN  - [main:DNS@244] - Unable to determine hostname "
    "for interface lo\n"
    "2026-12-01T18:43:34,614 - ERROR - [main:PulsarRegistrationManager@322] - Ledger "
    "root path: /ledgers already exists\n"
)


def test_the_signs_of_a_lost_bookie_are_found_and_a_clean_start_has_none() -> None:
    assert bookie_lost(_CLEAN) is None
    assert bookie_lost(_CLEAN + _LOST_RESOLVE) == "BookieIdNotResolvedException"
    assert bookie_lost(_LOST_PLACEMENT + _CLEAN) == "allBookies []"


def _service(tmp_path: Path, *, old_data: bool) -> PulsarService:
    service = PulsarService(StackPaths(cache=tmp_path / "cache", stack=tmp_path / "stack"))
    if old_data:
        (service.workdir / "data" / "metadata").mkdir(parents=True)
    service.prepare()
    return service


async def test_a_start_on_empty_data_is_not_watched(tmp_path: Path) -> None:
    service = _service(tmp_path, old_data=False)
    assert await service.start_problem(lambda: _LOST_RESOLVE) is None


async def test_a_restart_on_old_data_with_a_lost_bookie_is_a_problem(tmp_path: Path) -> None:
    service = _service(tmp_path, old_data=True)
    problem = await service.start_problem(lambda: _CLEAN + _LOST_PLACEMENT)
    assert problem is not None
    assert "cannot find the bookie it runs ('allBookies []'" in problem
    assert "streamwal stack clean" in problem


async def test_a_lost_bookie_seen_while_watching_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The output is read again until the watch ends, not once at the first answer."""
    monkeypatch.setattr(pulsar_module, "RESTART_SETTLE_SECONDS", 3.0)
    service = _service(tmp_path, old_data=True)
    reads: list[str] = []

    def output() -> str:
        reads.append("read")
        return _CLEAN + (_LOST_RESOLVE if len(reads) >= 3 else "")

    problem = await service.start_problem(output)
    assert problem is not None and "BookieIdNotResolvedException" in problem
    assert len(reads) == 3


async def test_a_clean_restart_on_old_data_is_probed_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pulsar_module, "RESTART_SETTLE_SECONDS", 0.6)
    service = _service(tmp_path, old_data=True)
    answers = iter([True, False])

    async def probe() -> bool:
        return next(answers)

    monkeypatch.setattr(service, "probe", probe)
    assert await service.start_problem(lambda: _CLEAN) is None
    problem = await service.start_problem(lambda: _CLEAN)
    assert problem == "the broker stopped answering right after it started"
