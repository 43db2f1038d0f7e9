"""One open transaction as its owner sees it, and the wire form of its markers.

A transaction lives on one vchannel. Its id is the time tick of its ``BeginTxn``
message; every message in it carries the id (``_tx``). The ``BeginTxn`` payload is its
keepalive in milliseconds, the ``CommitTxn`` payload the number of messages committed
(both decimal ASCII), so a reader can tell a committed transaction is complete.

Deadlines are in seconds of the owner's monotonic clock, not in TSO time: a node hands
timestamps out of cached blocks, so TSO time stands still within a block and jumps at
the next one, far more than a keepalive either way. Only the owner reads the keepalive
in the ``BeginTxn`` payload (when the begin persists); readers need no clock, as they
deliver a transaction at its commit and drop it at its rollback or at a new owner's
first time tick.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from streamwal.errors import TransactionError
from streamwal.wal.message_id import MessageId

__all__ = ["TxnSession", "TxnState", "decimal_payload", "parse_decimal_payload"]


def decimal_payload(value: int) -> bytes:
    return str(value).encode("ascii")


def parse_decimal_payload(payload: bytes) -> int | None:
    """The payload's decimal integer, or ``None`` if it is not one."""
    text = payload.decode("ascii", errors="replace")
    return int(text) if text.isdigit() and text.isascii() else None


class TxnState(enum.Enum):
    OPEN = "open"
    COMMITTING = "committing"
    ENDED = "ended"


@dataclass
class TxnSession:
    """What the owner tracks of one transaction between its begin and its end."""

    txn_id: int
    vchannel: str
    keepalive: float  # seconds
    begin_id: MessageId
    deadline: float  # the owner's monotonic clock
    state: TxnState = TxnState.OPEN
    committed_messages: int = 0
    in_flight: int = 0
    unknown: bool = False  # an append in it has an unknown outcome: no commit
    error: TransactionError | None = None  # why it ended, for later calls
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    committed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a commit under way is decided: a repeated commit waits for it rather
    than being refused, as the client may only be retrying a commit it timed out on."""

    def __post_init__(self) -> None:
        self.idle.set()

    def keep_alive(self, now: float) -> None:
        self.deadline = max(self.deadline, now + self.keepalive)

    def expired(self, now: float) -> bool:
        """Past its deadline with nothing under way: an append in flight or a commit
        is the client still at work, so neither is cut short (the append pushes the
        deadline on once it lands)."""
        return self.state is TxnState.OPEN and self.in_flight == 0 and self.deadline < now
