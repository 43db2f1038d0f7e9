"""Pulsar message ids in the WAL's neutral form.

Identity and order are (ledger, entry, batch index); the partition is not part of
it because a channel is one non-partitioned topic. The byte form is 20 bytes,
big-endian ``>qqi`` (ledger, entry, batch index); the readable form is
``ledger:entry`` or ``ledger:entry:batch`` for a message inside a batch.
"""

from __future__ import annotations

import struct
from typing import Any

import pulsar

from streamwal.errors import DecodeError
from streamwal.wal.message_id import MessageId

__all__ = ["PulsarMessageId"]

_FORMAT = struct.Struct(">qqi")


class PulsarMessageId(MessageId):
    """A position in a Pulsar topic."""

    __slots__ = ("batch_index", "entry", "ledger")

    def __init__(self, ledger: int, entry: int, batch_index: int = -1) -> None:
        self.ledger = ledger
        self.entry = entry
        self.batch_index = batch_index

    @classmethod
    def from_pulsar(cls, message_id: Any) -> PulsarMessageId:
        """From a ``pulsar.MessageId`` or the C extension's ``_pulsar.MessageId``."""
        return cls(message_id.ledger_id(), message_id.entry_id(), message_id.batch_index())

    def in_pack(self, index: int) -> PulsarMessageId:
        """Message ``index`` of the pack in this entry: Pulsar's own addressing of a
        message in a batch, ``(ledger, entry, index)``. Only an entry that is not a
        Pulsar batch holds a pack of several (its batch index is free for ours)."""
        if self.batch_index >= 0:
            raise DecodeError(
                f"entry {self} is part of a Pulsar batch: it cannot hold a pack of several"
            )
        return PulsarMessageId(self.ledger, self.entry, index)

    def follows_in_entry(self, previous: MessageId) -> bool:
        """Same ledger and entry, batch index one more (the byte form ends with it)."""
        return (
            type(previous) is PulsarMessageId
            and previous.batch_index >= 0
            and self.batch_index == previous.batch_index + 1
            and self.entry == previous.entry
            and self.ledger == previous.ledger
        )

    def pack_member_bytes(self, count: int) -> list[bytes]:
        """:meth:`in_pack`'s ids as bytes, packed directly (one call per message)."""
        if self.batch_index >= 0:
            self.in_pack(0)  # raises: a Pulsar batch's entry holds no pack of several
        ledger, entry, pack = self.ledger, self.entry, _FORMAT.pack
        return [pack(ledger, entry, index) for index in range(count)]

    def to_pulsar(self) -> pulsar.MessageId:
        return pulsar.MessageId(-1, self.ledger, self.entry, self.batch_index)

    def sort_key(self) -> tuple[int, ...]:
        return (self.ledger, self.entry, self.batch_index)

    def to_bytes(self) -> bytes:
        return _FORMAT.pack(self.ledger, self.entry, self.batch_index)

    #: ``PulsarMessageId(ledger, entry, batch_index).to_bytes()`` without the object, for
    #: a reader that handles each entry's id as bytes only (``streamwal verify``'s)
    bytes_of = staticmethod(_FORMAT.pack)

    @classmethod
    def from_bytes(cls, data: bytes) -> PulsarMessageId:
        if len(data) != _FORMAT.size:
            raise DecodeError(f"a Pulsar message id is {_FORMAT.size} bytes, got {len(data)}")
        return cls(*_FORMAT.unpack(data))

    @classmethod
    def parse(cls, text: str) -> PulsarMessageId:
        """Reverse ``str()``: ``ledger:entry`` or ``ledger:entry:batch``."""
        parts = text.strip().split(":")
        try:
            numbers = [int(p) for p in parts]
        except ValueError:
            raise DecodeError(f"not a Pulsar message id: {text!r}") from None
        if len(numbers) == 2:
            return cls(numbers[0], numbers[1])
        if len(numbers) == 3:
            return cls(numbers[0], numbers[1], numbers[2])
        raise DecodeError(f"not a Pulsar message id: {text!r}")

    def __str__(self) -> str:
        if self.batch_index < 0:
            return f"{self.ledger}:{self.entry}"
        return f"{self.ledger}:{self.entry}:{self.batch_index}"
