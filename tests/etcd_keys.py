"""Key prefixes a test owns in the shared etcd, deleted once the test is done.

Every node with an in-process TSO writes its leader and window keys under its
``tso.key_prefix``. The shared stack outlives every session, so a test that picks a
fresh prefix and walks away leaves two keys behind each run; over weeks of runs the
etcd fills with dead ones. A test takes its prefixes from :class:`EtcdPrefixes`
(usually through the ``etcd_prefix`` fixture) and they go when it ends.
"""

from __future__ import annotations

import uuid

from streamwal.tso.etcd_store import EtcdStore

__all__ = ["EtcdPrefixes"]

_DELETE_TIMEOUT_S = 5.0


class EtcdPrefixes:
    """Hands out unique prefixes (``/<name>-<hex>``) and deletes them in :meth:`delete_all`.

    Delete only once whatever writes under them (a node, an oracle) has stopped: a
    live leader would write its keys again.
    """

    def __init__(self, etcd_endpoint: str) -> None:
        self._etcd_endpoint = etcd_endpoint
        self._prefixes: list[str] = []

    def new(self, name: str) -> str:
        prefix = f"/{name}-{uuid.uuid4().hex[:10]}"
        self._prefixes.append(prefix)
        return prefix

    async def delete_all(self) -> None:
        prefixes, self._prefixes = self._prefixes, []
        if not prefixes:
            return
        async with EtcdStore([self._etcd_endpoint]) as store:
            for prefix in prefixes:
                # the trailing slash keeps "/a-1" from taking "/a-10..." with it
                await store.delete_prefix(prefix + "/", timeout=_DELETE_TIMEOUT_S)
