"""Deleting a channel: its log, the log's subscriptions, and the keys kept about it.

What a channel leaves behind is spread over owners that know nothing of each other:
the backend's log with its subscriptions (the WAL's cursor, each consumer's
checkpoint and the truncation point live there on Pulsar), and keys other layers keep
per channel (a cluster's set, assignment, status and move records in etcd). The
backend deletes the first (:class:`ChannelDeleter`, an optional ability of an opener);
each layer that keeps keys hands in a :class:`ChannelRecords`. :func:`delete_channel`
runs them in the order that loses nothing:

1. every record keeper says whether the channel is served (assigned to a live node):
   a refusal, :class:`~streamwal.errors.ChannelInUseError`, before anything goes;
2. the backend deletes the log, and refuses the same way while a producer or reader is
   attached (the broker checks that itself, so a node that takes the channel in
   between still stops the delete);
3. the keys go last: a delete stopped before them can be run again, and finds them.

Nothing is created to find out what exists (a Pulsar lookup would create the topic):
a channel with neither a log nor a key is :class:`~streamwal.errors.NoSuchChannelError`,
a second delete included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from streamwal.errors import ChannelInUseError, InvalidInputError, NoSuchChannelError
from streamwal.wal.backend import BackendOpener, validate_channel_name

__all__ = ["ChannelDeleter", "ChannelDeletion", "ChannelRecords", "delete_channel"]


@runtime_checkable
class ChannelDeleter(Protocol):
    """A backend opener that can delete a channel's log."""

    async def delete_log(self, channel: str) -> int | None:
        """Delete ``channel``'s log and its subscriptions; how many subscriptions went,
        ``None`` when there is no log (nothing is created to find out). Raises
        :class:`~streamwal.errors.ChannelInUseError`, deleting nothing, while a producer
        or reader is attached to it."""
        ...


@runtime_checkable
class ChannelRecords(Protocol):
    """Keys one layer keeps per channel (a cluster's records in etcd)."""

    async def served_by(self, channel: str) -> str | None:
        """Who serves ``channel`` now (``node 3 of the cluster under /x/cluster/``), or
        ``None``: a delete is refused while anyone does."""
        ...

    async def delete_channel_keys(self, channel: str) -> int:
        """Delete every key kept about ``channel``; how many there were."""
        ...


@dataclass(frozen=True, slots=True)
class ChannelDeletion:
    """What :func:`delete_channel` deleted."""

    channel: str
    #: the log was there (and is gone)
    log_deleted: bool
    subscriptions_deleted: int
    keys_deleted: int


async def delete_channel(
    opener: BackendOpener, channel: str, records: Sequence[ChannelRecords] = ()
) -> ChannelDeletion:
    """Delete ``channel``: its log and subscriptions, then every key ``records`` keep.

    Raises :class:`~streamwal.errors.ChannelInUseError` (nothing deleted) while a node
    serves it, :class:`~streamwal.errors.NoSuchChannelError` when there is nothing of
    it, :class:`~streamwal.errors.InvalidInputError` for a bad name or a backend that
    cannot delete. The caller checks its own node first: a channel it has open counts
    as served (the broker would also refuse: its producer is attached).
    """
    validate_channel_name(channel)
    if not isinstance(opener, ChannelDeleter):
        raise InvalidInputError(
            f"channel {channel!r}: its backend ({type(opener).__name__}) cannot delete a channel"
        )
    for keeper in records:
        holder = await keeper.served_by(channel)
        if holder is not None:
            raise ChannelInUseError(channel, f"served by {holder}")
    subscriptions = await opener.delete_log(channel)
    keys = 0
    for keeper in records:
        keys += await keeper.delete_channel_keys(channel)
    if subscriptions is None and keys == 0:
        raise NoSuchChannelError(channel, "no log and no key of it")
    return ChannelDeletion(channel, subscriptions is not None, subscriptions or 0, keys)
