"""Fixtures shared by the node's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def module_workdir(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Path:
    """A folder for the node processes a module's tests share (``tmp_path`` is a test's)."""
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
