"""A message id as the Pulsar C extension hands one over, for tests that play the
client's part without a broker."""

from __future__ import annotations

__all__ = ["FakeId"]


class FakeId:
    """The ledger, entry and index in the batch (``-1``: not in one) the backend reads."""

    def __init__(self, ledger: int, entry: int, batch_index: int = -1, batch_size: int = 0) -> None:
        self._parts = (ledger, entry, batch_index)
        self._batch_size = batch_size

    def serialize(self) -> bytes:
        """Just the field the channel reads: MessageIdData.batch_size (6, varint)."""
        return bytes([0x30, self._batch_size]) if self._batch_size else b""

    def ledger_id(self) -> int:
        return self._parts[0]

    def entry_id(self) -> int:
        return self._parts[1]

    def batch_index(self) -> int:
        return self._parts[2]
