"""The Pulsar clients an opener's writing channels share.

A client is one connection per broker and a few threads of its own (I/O, listener);
with one client per channel, a node of 16 channels runs 16 sets of threads that
compete for the GIL on every send. Sharing clients saves that, but a broker closes a
whole connection when a message comes on it for a producer it no longer has ("Received
message, but the producer is not ready ... Closing the connection"): the sends a fenced
producer had in flight when its channel moved. Every other producer on that connection
then reconnects and sends its pending messages again, which the broker's deduplication
answers without a position; the sender places those by reading the log back
(:mod:`.readback`), so the neighbours of a moved channel lose nothing, but each such
move costs them a reconnect. ``pulsar.writer_clients`` bounds how many clients the
writing channels share: ``0`` gives each its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulsar.asyncio import PulsarException

from streamwal.timeouts import within

__all__ = ["WriterClients", "close_client"]


class WriterClients:
    """At most ``size`` clients (``0``: one per channel), each handed to the channel
    with the fewest users so far, and closed when its last channel gives it back."""

    def __init__(self, new_client: Callable[[], Any], size: int, close_timeout: float) -> None:
        self._new_client = new_client
        self._size = size
        self._close_timeout = close_timeout
        #: users of each client handed out, by client
        self._users: dict[Any, int] = {}

    def take(self) -> Any:
        """A client for one more writing channel (no I/O: a new one connects on use)."""
        if self._size == 0 or len(self._users) < self._size:
            client = self._new_client()
            self._users[client] = 1
            return client
        client = min(self._users, key=self._users.__getitem__)
        self._users[client] += 1
        return client

    async def give_back(self, client: Any) -> None:
        """One channel is done with ``client``; the last one closes it."""
        users = self._users.get(client)
        if users is None:
            return
        if users > 1:
            self._users[client] = users - 1
            return
        del self._users[client]
        await close_client(client, self._close_timeout)

    async def close(self) -> None:
        clients, self._users = list(self._users), {}
        for client in clients:
            await close_client(client, self._close_timeout)


async def close_client(client: Any, timeout: float) -> None:
    """Close a Pulsar client, waiting at most ``timeout``."""
    try:
        await within(client.close(), timeout=timeout)
    except (PulsarException, TimeoutError):
        pass  # unreachable broker: the client is gone either way
