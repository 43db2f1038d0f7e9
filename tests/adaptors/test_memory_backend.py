"""The conformance suite on the in-process backend."""

from __future__ import annotations

import itertools

import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId, MemoryOpener
from streamwal.adaptors.testing import BackendHarness, ConformanceSuite


class TestMemoryBackend(ConformanceSuite):
    @pytest.fixture
    def harness(self) -> BackendHarness:
        store = MemoryLogStore(max_message_size=1024)
        counter = itertools.count()
        return BackendHarness(
            node_a=MemoryOpener(store),
            node_b=MemoryOpener(store),
            channel=lambda: f"mem-{next(counter)}",
            max_message_size=1024,
            foreign_id=MemoryMessageId(10_000),
        )
