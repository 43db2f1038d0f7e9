"""How a reader delivers transactions: whole, in order, at their commit, or never.

A reader holds a transaction's begin and messages until its ``CommitTxn``, then
delivers them with the commit, in log order; a ``RollbackTxn`` drops them. The log can
hold a transaction that never ends (its owner was fenced, or died): a new owner's
first time tick (a time tick that confirms itself) drops every transaction still
held, as the new owner treats them as rolled back. A transaction whose begin this
reader did not see (it started inside it) is not delivered: start at a message's
LastConfirmed, which an open transaction holds at its begin, to see every
transaction whole. A commit whose count of messages does not match what was read is
dropped (and logged) rather than delivered incomplete.
"""

from __future__ import annotations

import logging

from streamwal.wal.interceptors.txn.session import parse_decimal_payload
from streamwal.wal.message import ImmutableMessage, MessageType

__all__ = ["TxnAssembler"]

_log = logging.getLogger(__name__)

_NONE: tuple[ImmutableMessage, ...] = ()


class TxnAssembler:
    """Feed every message in log order; deliver what :meth:`feed` returns."""

    def __init__(self, channel: str) -> None:
        self._channel = channel
        self._held: dict[int, list[ImmutableMessage]] = {}
        self.dropped = 0
        """Transactions dropped: rolled back, cut by a change of owner, or incomplete."""

    @property
    def held(self) -> int:
        """Transactions begun and not ended yet, as far as this reader read."""
        return len(self._held)

    def feed(self, msg: ImmutableMessage) -> tuple[ImmutableMessage, ...] | list[ImmutableMessage]:
        """What ``msg`` releases: itself, a committed transaction, or nothing."""
        kind = msg.type
        if kind is MessageType.TIME_TICK:
            if self._held and msg.last_confirmed == msg.message_id:  # a new owner
                self.dropped += len(self._held)
                self._held.clear()
            return (msg,)
        if kind is MessageType.BEGIN_TXN:
            self._held[msg.time_tick] = [msg]
            return _NONE
        txn_id = msg.txn_id
        if txn_id is None:
            return (msg,)
        held = self._held.get(txn_id)
        if held is None:
            return _NONE  # begun before this reader started, or already ended
        if kind is MessageType.ROLLBACK_TXN:
            del self._held[txn_id]
            self.dropped += 1
            return _NONE
        if kind is not MessageType.COMMIT_TXN:
            held.append(msg)
            return _NONE
        del self._held[txn_id]
        count = parse_decimal_payload(msg.payload)
        if count != len(held) - 1:
            self.dropped += 1
            _log.warning(
                "channel %s: transaction %d committed %s messages, %d were read: not delivered",
                self._channel,
                txn_id,
                count,
                len(held) - 1,
            )
            return _NONE
        held.append(msg)
        return held
