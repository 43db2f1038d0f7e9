"""Fixtures of the TSO tests: the etcd to use and a unique key prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tso.etcd_proc import EtcdProcess


@pytest.fixture(scope="session")
def etcd_endpoint(stack: Any) -> str:
    """The shared stack's etcd (``host:port``)."""
    return str(stack.etcd_endpoint)


@pytest.fixture
def tso_prefix() -> str:
    """A key prefix no other test uses."""
    return f"/streamwal-test/tso-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def private_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """An etcd of this test alone, started; killed at teardown."""
    etcd = EtcdProcess(tmp_path / "etcd-data")
    etcd.start()
    try:
        yield etcd
    finally:
        etcd.kill()
