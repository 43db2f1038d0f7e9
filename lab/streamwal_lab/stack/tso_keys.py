"""A throw-away run's TSO keys (a bench suite, the demo, a chaos scenario), deleted once
its oracle is gone.

Every such run uses an in-process oracle under a prefix of its own; its window key
would stay in etcd for ever, one more per run, and no later run reads it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from streamwal.errors import StreamwalError
from streamwal.tso.etcd_store import EtcdStore

__all__ = ["delete_tso_keys", "deleted_afterwards"]


async def delete_tso_keys(etcd_endpoint: str, prefixes: Sequence[str]) -> None:
    """Delete every key under each prefix; best effort (tidying must not hide results)."""
    if not prefixes:
        return
    with contextlib.suppress(StreamwalError, OSError):
        async with EtcdStore([etcd_endpoint]) as store:
            for prefix in prefixes:
                with contextlib.suppress(StreamwalError):
                    # the trailing slash keeps "/bench-1" from taking "/bench-10..." along
                    await store.delete_prefix(prefix + "/", timeout=2.0)


@contextlib.asynccontextmanager
async def deleted_afterwards(etcd_endpoint: str, prefixes: Sequence[str]) -> AsyncIterator[None]:
    """Enter before the oracle (so this exits after it): its keys go when it has stopped."""
    try:
        yield
    finally:
        await delete_tso_keys(etcd_endpoint, prefixes)
