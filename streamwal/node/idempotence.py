"""A client's identity as an idempotent producer: a producer id and, per channel, the
next sequence number.

:class:`~streamwal.node.client.NodeClient` numbers every append with one; its retries
reuse the numbers, so an append whose outcome is unknown (a lost connection, a
timeout, a change of owner) is retried without risking a second copy. Share one
identity between the clients of several nodes to retry an append on another node
(the channel's next owner rebuilds the window from the log).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

__all__ = ["ProducerIdentity"]


@dataclass
class ProducerIdentity:
    """``producer_id`` defaults to 63 random bits: unique without coordination."""

    producer_id: int = field(default_factory=lambda: secrets.randbits(63))
    _next: dict[str, int] = field(default_factory=dict, repr=False)

    def next_sequence(self, pchannel: str) -> int:
        """The sequence number of the next new append to ``pchannel``."""
        seq = self._next.get(pchannel, 0)
        self._next[pchannel] = seq + 1
        return seq
