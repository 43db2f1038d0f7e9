"""One open transaction as its owner sees it, and the wire form of its markers.

A transaction lives on one vchannel. Its id is the time tick of its ``BeginTxn``
message; every message in it carries the id (``_tx``). The ``BeginTxn`` payload is its
keepalive in milliseconds, the ``CommitTxn`` payload the number of messages committed
(both decimal ASCII), so a reader can tell a committed transaction is complete.
Deadlines are in TSO physical milliseconds (a hybrid timestamp shifted right by its
18 logical bits), as Milvus measures its transaction keepalive.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from streamwal.errors import TransactionError
from streamwal.wal.message_id import MessageId

__all__ = ["TxnSession", "TxnState", "decimal_payload", "parse_decimal_payload", "physical_ms"]

_LOGICAL_BITS = 18  # the hybrid timestamp layout of docs/wire-format.md


def physical_ms(time_tick: int) -> int:
    return time_tick >> _LOGICAL_BITS


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
    keepalive_ms: int
    begin_id: MessageId
    deadline_ms: int
    state: TxnState = TxnState.OPEN
    committed_messages: int = 0
    in_flight: int = 0
    unknown: bool = False  # an append in it has an unknown outcome: no commit
    error: TransactionError | None = None  # why it ended, for later calls
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def keep_alive(self, time_tick: int) -> None:
        self.deadline_ms = max(self.deadline_ms, physical_ms(time_tick) + self.keepalive_ms)
