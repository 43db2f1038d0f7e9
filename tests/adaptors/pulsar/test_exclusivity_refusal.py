"""A broker that accepts two exclusive producers is refused (unit, no broker)."""

from __future__ import annotations

from typing import Any

import pytest

from adaptors.pulsar import verify_exclusive_access
from wal.errors import ExclusivityNotEnforcedError


class _Producer:
    async def send(self, payload: bytes, **_: Any) -> None:
        return None

    async def close(self) -> None:
        return None


class _LaxBroker:
    """Plays a broker (or proxy, or mock) that ignores access modes."""

    def __init__(self) -> None:
        self.created = 0

    async def create_producer(self, topic: str, **_: Any) -> _Producer:
        self.created += 1
        return _Producer()


async def test_a_broker_accepting_two_exclusive_producers_is_refused() -> None:
    broker = _LaxBroker()
    with pytest.raises(ExclusivityNotEnforcedError, match="pulsar://lax:6650"):
        await verify_exclusive_access(broker, "persistent://public/default/", "pulsar://lax:6650")
    assert broker.created == 2
