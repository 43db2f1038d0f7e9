"""The groups of :mod:`tests.parallel` hold on two real xdist workers: a module whose
tests share a module-scoped fixture runs in one worker, whatever pytest keeps an item's
id in (pytest 9 moved it, and xdist's grouping silently stopped: a module's shared
cluster then started in both workers and one worker's teardown stopped it under the
other's tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent

_MODULE = """
import os, time, pytest

@pytest.fixture(scope="module")
def shared():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("i", range(4))
def test_shares(shared, i):
    time.sleep(0.3)
    with open(os.environ["RAN"], "a") as f:
        f.write(f"shares {os.environ['PYTEST_XDIST_WORKER']}\\n")

@pytest.mark.parametrize("i", range(4))
def test_alone(i):
    time.sleep(0.3)
    with open(os.environ["RAN"], "a") as f:
        f.write(f"alone {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""


def test_a_modules_shared_fixture_keeps_its_tests_in_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(_MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    ran = tmp_path / "ran.txt"
    env = {**os.environ, "RAN": str(ran), "PYTHONPATH": str(_REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p",
         "tests.parallel", "-p", "no:cacheprovider", "-q", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split() for line in ran.read_text().splitlines()]
    sharing = {worker for kind, worker in lines if kind == "shares"}
    alone = {worker for kind, worker in lines if kind == "alone"}
    assert len(lines) == 8
    assert len(sharing) == 1, lines  # one worker holds the module's fixture
    assert alone - sharing, lines  # the rest goes to the other worker too


def test_one_process_runs_a_grouped_module_too(tmp_path: Path) -> None:
    """``./dev test <args>`` runs pytest in one process, where xdist's ``loadgroup``
    option does not exist: grouping must not fail the run there."""
    (tmp_path / "test_grouped.py").write_text(
        _MODULE.replace('os.environ["PYTEST_XDIST_WORKER"]', '"one"').replace(
            "os.environ['PYTEST_XDIST_WORKER']", "'one'"
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "RAN": str(tmp_path / "ran.txt"), "PYTHONPATH": str(_REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.parallel", "-p", "no:cacheprovider",
         "-q", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 passed" in done.stdout, done.stdout
