"""Fixtures shared by the node's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, plain_node, running


@pytest.fixture(scope="module")
def module_workdir(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Path:
    """A folder for the node processes a module's tests share (``tmp_path`` is a test's)."""
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture
async def node(
    stack: StackInfo,
    tmp_path: Path,
    etcd_prefix: Callable[[str], str],
    request: pytest.FixtureRequest,
) -> AsyncIterator[NodeProcess]:
    """A started node of the test's own (:func:`plain_node`); a module that needs
    another kind of node defines its own ``node``."""
    tag = request.module.__name__.rsplit(".", 1)[-1]
    async with running(plain_node(tmp_path, stack, etcd_prefix(tag))) as one:
        yield one
