"""The kinds of message a WAL carries."""

from __future__ import annotations

import enum

__all__ = ["MessageType"]


class MessageType(enum.Enum):
    """A message kind; the value is its name on the wire (the ``_t`` property).

    ``is_system``: the WAL writes these itself (time ticks) and
    :meth:`streamwal.wal.WAL.append` refuses them, as Milvus does for its system messages.
    """

    TIME_TICK = ("TimeTick", True)
    INSERT = ("Insert", False)
    DELETE = ("Delete", False)
    CREATE_COLLECTION = ("CreateCollection", False)
    DROP_COLLECTION = ("DropCollection", False)
    FLUSH = ("Flush", False)
    USER = ("User", False)

    def __init__(self, wire_name: str, is_system: bool) -> None:
        self.wire_name = wire_name
        self.is_system = is_system

    @classmethod
    def from_wire(cls, name: str) -> MessageType | None:
        """The type named ``name`` on the wire, or ``None`` if there is none."""
        return _BY_WIRE_NAME.get(name)

    def __str__(self) -> str:
        return self.wire_name


_BY_WIRE_NAME = {t.wire_name: t for t in MessageType}
