"""One allocator protocol, and the cached fast lane declared as its own protocol."""

from __future__ import annotations

import streamwal.tso
import streamwal.wal
from streamwal.timestamps import CachedTimestampAllocator, TimestampAllocator
from streamwal.tso import LocalAllocator


class _Source:
    async def fetch(self, count: int) -> int:
        return 1000

    async def close(self) -> None:
        return None


class _Plain:
    async def allocate(self) -> int:
        return 1

    async def sync(self) -> None:
        return None


def test_one_protocol_everywhere() -> None:
    assert streamwal.wal.TimestampAllocator is TimestampAllocator
    assert streamwal.tso.TimestampAllocator is TimestampAllocator


def test_the_local_allocator_declares_the_cached_lane() -> None:
    allocator = LocalAllocator(_Source(), 10)
    assert isinstance(allocator, CachedTimestampAllocator)
    assert isinstance(allocator, TimestampAllocator)


def test_a_plain_allocator_is_not_taken_for_a_cached_one() -> None:
    assert isinstance(_Plain(), TimestampAllocator)
    assert not isinstance(_Plain(), CachedTimestampAllocator)
