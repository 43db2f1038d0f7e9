"""One import root: every module is ``streamwal.<...>``, and no module loads twice.

``tso/`` and ``adaptors/`` sit at the repository root and are also ``streamwal/tso``
and ``streamwal/adaptors`` (symlinks), so a bare ``import tso`` from the root could
load a second copy of every class. A lint rule forbids the bare names and the
packages refuse to load under them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import streamwal.errors
import streamwal.tso
from streamwal.adaptors.pulsar import errors as pulsar_errors

ROOT = Path(__file__).resolve().parent.parent
BARE = ("wal", "tso", "node", "adaptors")


def _banned(source: str) -> list[str]:
    """The codes ruff's banned-api rule (TID251, configured in pyproject) gives ``source``."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    out = subprocess.run(
        [ruff, "check", "--config", str(ROOT / "pyproject.toml"), "--select", "TID251",
         "--output-format", "json", "--stdin-filename", "probe.py", "-"],
        input=source, capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    return [d["code"] for d in json.loads(out.stdout)]


@pytest.mark.parametrize(
    "line",
    [
        "import wal",
        "from wal.errors import ClosedError",
        "import tso.oracle",
        "from tso import TimestampOracle",
        "from adaptors.pulsar import PulsarOpener",
        "from node import cli",
    ],
)
def test_the_lint_rule_refuses_a_bare_import(line: str) -> None:
    assert _banned(f"{line}\n") == ["TID251"]


def test_the_lint_rule_accepts_the_import_root() -> None:
    assert _banned("from streamwal.tso import TimestampOracle\nimport streamwal.wal\n") == []


def _import_from_root(name: str) -> subprocess.CompletedProcess[str]:
    """``import name`` in a Python started in the repository root (on ``sys.path``)."""
    return subprocess.run(
        [sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd=ROOT,
        check=False,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["tso", "tso.oracle", "adaptors.pulsar", "adaptors.memory"])
def test_a_bare_import_from_the_repository_root_is_refused(name: str) -> None:
    out = _import_from_root(name)
    assert out.returncode != 0
    assert f"import streamwal.{name.split('.')[0]}, not" in out.stderr


@pytest.mark.parametrize("name", ["wal", "node"])
def test_moved_packages_are_gone_from_the_root(name: str) -> None:
    out = _import_from_root(name)
    assert "ModuleNotFoundError" in out.stderr


def test_every_loaded_module_is_under_the_import_root() -> None:
    __import__("streamwal.cli")
    __import__("streamwal.adaptors.memory")
    bare = sorted(m for m in sys.modules if m.split(".")[0] in BARE)
    assert bare == []
    # one copy of the errors: the Pulsar translation returns the classes callers catch
    translated = pulsar_errors.translate(TimeoutError(), channel="c", what="append")
    assert type(translated) is streamwal.errors.UnavailableError
    assert streamwal.tso.__file__ is not None
    assert Path(streamwal.tso.__file__).parent.name == "tso"
