"""A client's identity as an idempotent producer: a producer id and, per channel, the
next sequence number.

:class:`~streamwal.node.client.NodeClient` numbers every append with one; its retries
reuse the numbers, so an append whose outcome is unknown (a lost connection, a
timeout, a change of owner) is retried without risking a second copy. Share one
identity between the clients of several nodes to retry an append on another node
(the channel's next owner rebuilds the window from the log).

The node takes numbers out of order within its window (concurrent appends), but
refuses one a whole window ahead, so a number given up on must not leave a hole:
:meth:`ProducerIdentity.give_up` takes it back when the append is known not written
and was the last one numbered; otherwise (it may be in the log, or later numbers are
out) the identity takes a fresh producer id, numbered from 0, as
Kafka's producer does after an error it cannot resolve.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from streamwal.errors import WriteOutcome

__all__ = ["ProducerIdentity"]


@dataclass
class ProducerIdentity:
    """``producer_id`` defaults to 63 random bits: unique without coordination."""

    producer_id: int = field(default_factory=lambda: _fresh_id())
    _next: dict[str, int] = field(default_factory=dict, repr=False)

    def next_sequence(self, pchannel: str) -> int:
        """The sequence number of the next new append to ``pchannel``."""
        seq = self._next.get(pchannel, 0)
        self._next[pchannel] = seq + 1
        return seq

    def give_up(self, pchannel: str, sequence: int, outcome: WriteOutcome) -> None:
        """The caller gives up on the append numbered ``sequence`` (no more retries)."""
        last = self._next.get(pchannel, 0) - 1
        if outcome is WriteOutcome.NOT_WRITTEN and sequence == last:
            self._next[pchannel] = sequence
            return
        self.renew()

    def renew(self) -> None:
        """A fresh producer id, numbered from 0: after a number was refused (a gap, or
        too old), or one whose fate is unknown was given up on."""
        self.producer_id = _fresh_id()
        self._next.clear()


def _fresh_id() -> int:
    return secrets.randbits(63)
