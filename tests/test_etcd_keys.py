"""A test's etcd prefixes are gone after :meth:`EtcdPrefixes.delete_all`, and only they."""

from __future__ import annotations

import pytest

from streamwal.tso.etcd_store import EtcdStore
from streamwal_lab.stack import StackInfo
from tests.etcd_keys import EtcdPrefixes

pytestmark = pytest.mark.integration


async def test_delete_all_drops_the_prefixes_handed_out_and_nothing_next_to_them(
    stack: StackInfo,
) -> None:
    prefixes = EtcdPrefixes(stack.etcd_endpoint)
    first, second = prefixes.new("keys"), prefixes.new("keys")
    assert first != second and first.startswith("/keys-")
    neighbour = first + "0/tso/leader"  # shares the text of the prefix, not the path
    async with EtcdStore([stack.etcd_endpoint]) as store:
        try:
            for key in (f"{first}/tso/leader", f"{second}/tso/timestamp", neighbour):
                created, _ = await store.create_if_absent(key, b"x", lease_id=0)
                assert created
            await prefixes.delete_all()
            assert await store.get(f"{first}/tso/leader") is None
            assert await store.get(f"{second}/tso/timestamp") is None
            assert await store.get(neighbour) == b"x"
        finally:
            await store.delete_prefix(first + "0/")
