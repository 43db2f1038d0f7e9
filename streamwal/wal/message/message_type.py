"""The kinds of message a WAL carries."""

from __future__ import annotations

import enum

__all__ = ["MessageType"]


class MessageType(enum.Enum):
    """A message kind; the value is its name on the wire (the ``_t`` property).

    ``is_system``: the WAL writes these itself (time ticks) and
    :meth:`streamwal.wal.WAL.append` refuses them, as Milvus does for its system messages.
    ``is_txn_marker``: a transaction's begin, commit or rollback, written by
    ``begin_txn``/``commit_txn``/``rollback_txn`` only; ``append`` refuses them too.
    """

    TIME_TICK = ("TimeTick", True)
    INSERT = ("Insert", False)
    DELETE = ("Delete", False)
    CREATE_COLLECTION = ("CreateCollection", False)
    DROP_COLLECTION = ("DropCollection", False)
    FLUSH = ("Flush", False)
    USER = ("User", False)
    BEGIN_TXN = ("BeginTxn", False, True)
    COMMIT_TXN = ("CommitTxn", False, True)
    ROLLBACK_TXN = ("RollbackTxn", False, True)

    def __init__(self, wire_name: str, is_system: bool, is_txn_marker: bool = False) -> None:
        self.wire_name = wire_name
        self.is_system = is_system
        self.is_txn_marker = is_txn_marker

    @classmethod
    def from_wire(cls, name: str) -> MessageType | None:
        """The type named ``name`` on the wire, or ``None`` if there is none."""
        return _BY_WIRE_NAME.get(name)

    def __str__(self) -> str:
        return self.wire_name


_BY_WIRE_NAME = {t.wire_name: t for t in MessageType}
