"""The kinds of message a WAL carries: its own records, and the callers' opaque types.

A caller's type is any string it chooses (Milvus's ``Insert``, ``CreateCollection``,
even ``TimeTick``); the WAL carries it verbatim and never interprets it. The WAL's own
records (the time ticks it writes, transaction markers) are :class:`MessageType`
members, told apart from a caller's message by that, not by their name: a caller may
append a message it calls ``TimeTick`` and reads it back as a caller's message.
"""

from __future__ import annotations

import enum
from typing import TypeAlias

__all__ = ["MessageKind", "MessageType", "is_wal_type", "type_name"]


class MessageType(enum.Enum):
    """A record the WAL writes itself; the value is its name in the log.

    ``is_system``: the WAL writes these on its own (time ticks).
    ``is_txn_marker``: a transaction's begin, commit or rollback, written by
    ``begin_txn``/``commit_txn``/``rollback_txn`` only. :meth:`streamwal.wal.WAL.append`
    refuses every member (a caller's type is a string).

    The upper-case names below the members (``MessageType.INSERT``, ...) are plain
    strings, not members: common caller types, kept so callers need not spell them; the
    WAL treats them as any other caller string.
    """

    TIME_TICK = ("TimeTick", True)
    BEGIN_TXN = ("BeginTxn", False, True)
    COMMIT_TXN = ("CommitTxn", False, True)
    ROLLBACK_TXN = ("RollbackTxn", False, True)

    INSERT = enum.nonmember("Insert")
    DELETE = enum.nonmember("Delete")
    CREATE_COLLECTION = enum.nonmember("CreateCollection")
    DROP_COLLECTION = enum.nonmember("DropCollection")
    FLUSH = enum.nonmember("Flush")
    USER = enum.nonmember("User")

    def __init__(self, wire_name: str, is_system: bool, is_txn_marker: bool = False) -> None:
        self.wire_name = wire_name
        self.is_system = is_system
        self.is_txn_marker = is_txn_marker

    @classmethod
    def from_wire(cls, name: str) -> MessageType | None:
        """The WAL record named ``name``, or ``None`` if there is none."""
        return _BY_WIRE_NAME.get(name)

    def __str__(self) -> str:
        return self.wire_name


MessageKind: TypeAlias = "MessageType | str"
"""A message's type: one of the WAL's own records, or a caller's opaque string."""

_BY_WIRE_NAME = {t.wire_name: t for t in MessageType}


def is_wal_type(kind: MessageKind) -> bool:
    """Whether ``kind`` is a record the WAL writes itself (not a caller's type)."""
    return type(kind) is MessageType


def type_name(kind: MessageKind) -> str:
    """The name ``kind`` has in the log and on the node's API."""
    if isinstance(kind, MessageType):
        return kind.wire_name
    return kind
