"""Holds on LastConfirmed: no message is stamped with a last-confirmed id past a hold.

A transaction still open holds LastConfirmed at its begin, so a reader that starts at
any later message's ``_lc`` sees the begin and every message of the transaction, and
can deliver it whole at its commit (Milvus #45088 lost data where a time tick
confirmed past transactions still open).
"""

from __future__ import annotations

from streamwal.wal.message_id import MessageId

__all__ = ["ConfirmHolds"]


class ConfirmHolds:
    """Holds by key (a transaction id); single event loop, synchronous."""

    __slots__ = ("_holds",)

    def __init__(self) -> None:
        self._holds: dict[int, MessageId] = {}

    def __bool__(self) -> bool:
        return bool(self._holds)

    def hold(self, key: int, message_id: MessageId) -> None:
        self._holds[key] = message_id

    def release(self, key: int) -> None:
        self._holds.pop(key, None)

    def cap(self, last_confirmed: MessageId) -> MessageId:
        """``last_confirmed``, or the oldest hold if that is older."""
        if not self._holds:
            return last_confirmed
        oldest = min(self._holds.values())
        return oldest if oldest < last_confirmed else last_confirmed
