"""Fixtures shared by the node's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
