"""Fixtures of the TSO tests: the etcd to use and a unique key prefix per test.

The prefix lives in the shared etcd and is deleted after the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.etcd_keys import EtcdPrefixes
from tests.tso.etcd_proc import EtcdProcess


@pytest.fixture(scope="session")
def etcd_endpoint(stack: Any) -> str:
    """The shared stack's etcd (``host:port``)."""
    return str(stack.etcd_endpoint)


@pytest.fixture
async def tso_prefix(etcd_endpoint: str) -> AsyncIterator[str]:
    """A key prefix no other test uses, in the shared etcd; deleted afterwards."""
    prefixes = EtcdPrefixes(etcd_endpoint)
    yield prefixes.new("streamwal-test/tso")
    await prefixes.delete_all()


@pytest.fixture
def private_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """An etcd of this test alone, started; killed at teardown."""
    etcd = EtcdProcess(tmp_path / "etcd-data")
    etcd.start()
    try:
        yield etcd
    finally:
        etcd.kill()
