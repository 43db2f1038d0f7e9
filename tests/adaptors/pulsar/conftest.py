"""Fixtures of the Pulsar backend's tests: namespaces of their own on the session's
stock broker (``stock``, in ``tests/conftest.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.tso import EtcdConfig, TsoConfig
from streamwal_lab.chaos.services import PrivatePulsar
from streamwal_lab.stack import StackInfo
from tests.adaptors.pulsar.stock import StockNamespace


@pytest.fixture
async def namespace(stock: PrivatePulsar) -> Callable[..., object]:
    """A fresh namespace on the stock broker; ``deduplication=True`` enables it there."""
    admin = PulsarAdmin(stock.admin_url)

    async def make(*, deduplication: bool = True) -> str:
        name = f"stock-{uuid.uuid4().hex[:8]}"
        await admin.put(f"namespaces/public/{name}")
        if deduplication:
            await admin.post(f"namespaces/public/{name}/deduplication", True)
        return name

    return make


@pytest.fixture
async def stock_ns(
    stack: StackInfo,
    stock: PrivatePulsar,
    namespace: Callable[..., object],
    etcd_prefix: Callable[[str], str],
) -> StockNamespace:
    """A fresh namespace on the stock broker, with a TSO on the shared etcd."""
    name = await namespace()  # type: ignore[misc]
    tso = TsoConfig(etcd=EtcdConfig((stack.etcd_endpoint,)), key_prefix=etcd_prefix("stock"))
    return StockNamespace(stock, name, PulsarAdmin(stock.admin_url), tso)
