"""Fixtures shared by the node's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal_lab.stack import StackInfo


@pytest.fixture
async def channel(stack: StackInfo, unique: str) -> AsyncIterator[str]:
    """A fresh channel name; its topic is deleted after the test, whatever it holds."""
    name = f"node-{unique}"
    yield name
    topic = PulsarAdmin.topic_path(PulsarConfig(service_url=stack.pulsar_url).topic(name))
    await PulsarAdmin(stack.pulsar_admin_url).delete(f"{topic}?force=true")


@pytest.fixture(scope="module")
def module_workdir(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Path:
    """A folder for the node processes a module's tests share (``tmp_path`` is a test's)."""
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
