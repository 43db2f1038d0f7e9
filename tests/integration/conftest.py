"""Fixtures shared by the tests on the real stack."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from streamwal.tso import EtcdConfig, InProcessTSO, TsoConfig
from streamwal_lab.stack import StackInfo


@pytest.fixture
async def tso(
    stack: StackInfo, etcd_prefix: Callable[[str], str], request: pytest.FixtureRequest
) -> AsyncIterator[InProcessTSO]:
    """An in-process TSO on the shared etcd, under a key prefix of the test's own (named
    after its module), so no other test's oracle moves its time."""
    tag = request.module.__name__.rsplit(".", 1)[-1]
    config = TsoConfig(etcd=EtcdConfig((stack.etcd_endpoint,)), key_prefix=etcd_prefix(tag))
    async with InProcessTSO(config) as tso:
        yield tso
