"""A cluster's keys about one channel, for deleting the channel
(:class:`~streamwal.wal.deletion.ChannelRecords`).

Per channel the cluster keeps ``channels/<name>`` (the set), ``assign/<name>``,
``status/<name>``, ``released/<name>``, ``requested/<name>``, ``terms/<name>`` and its moves,
``moves/<time>-<name>`` (:mod:`streamwal.cluster.records`). A channel assigned to a
live node is served: deleting it is refused until the balancer has withdrawn it (take
it out of the set first). An assignment left to a node that is gone does not count:
no balancer may be left to withdraw it.

:func:`delete_channels` is what ``cluster channels remove --delete-topics`` runs once
the channels are out of the set: :func:`~streamwal.wal.deletion.delete_channel` for
each (the code of ``streamwal channel delete`` and of a node's ``DeleteChannel``), tried
again while the former owner still holds the topic.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence

from streamwal.cluster.operations import TopicsInUseError
from streamwal.cluster.records import ClusterKeys
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import read_view
from streamwal.errors import ChannelInUseError, NoSuchChannelError
from streamwal.wal.backend import BackendOpener
from streamwal.wal.deletion import ChannelDeletion, ChannelRecords, delete_channel

__all__ = ["ClusterChannelRecords", "delete_channels"]

#: ``moves/`` keys are ``<20-digit time>-<channel>``
_MOVE_STAMP = 21


class ClusterChannelRecords:
    """The cluster under ``keys`` as one keeper of a channel's keys."""

    def __init__(self, store: ClusterStore, keys: ClusterKeys) -> None:
        self._store = store
        self._keys = keys

    async def served_by(self, channel: str) -> str | None:
        view = await read_view(self._store, self._keys)
        held = view.assignments.get(channel)
        if held is None or held.node not in view.nodes:
            return None
        return f"node {held.node} of the cluster under {self._keys.root}"

    def _keys_of(self, channel: str) -> list[str]:
        k = self._keys
        families = (k.channels, k.assign, k.status, k.released, k.requested, k.terms)
        return [prefix + channel for prefix in families]

    async def delete_channel_keys(self, channel: str) -> int:
        _revision, moves = await self._store.read_prefix(self._keys.moves)
        own_moves = [
            e.key for e in moves if e.key[len(self._keys.moves) + _MOVE_STAMP :] == channel
        ]
        return await self._store.delete_keys([*self._keys_of(channel), *own_moves])


async def delete_channels(
    opener: BackendOpener,
    channels: Iterable[str],
    records: Sequence[ChannelRecords],
    *,
    timeout_s: float,
    poll_s: float = 0.5,
) -> dict[str, ChannelDeletion | None]:
    """Delete each channel (:func:`~streamwal.wal.deletion.delete_channel`: its log,
    subscriptions and keys); ``None`` for one of which nothing was left. A channel
    still in use (its former owner has not let go of the topic yet) is tried again
    until ``timeout_s`` (:class:`TopicsInUseError`)."""
    pending = sorted(set(channels))
    outcome: dict[str, ChannelDeletion | None] = {}
    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    while pending:
        for channel in list(pending):
            try:
                outcome[channel] = await delete_channel(opener, channel, records)
            except NoSuchChannelError:
                outcome[channel] = None
            except ChannelInUseError as exc:
                last[channel] = str(exc)
                continue
            pending.remove(channel)
        if not pending:
            break
        if time.monotonic() > deadline:
            reasons = "; ".join(last[c] for c in pending)
            raise TopicsInUseError(
                f"{len(pending)} channel(s) not deleted after {timeout_s:g}s ({reasons}); "
                "run the command again to retry"
            )
        await asyncio.sleep(poll_s)
    return outcome
