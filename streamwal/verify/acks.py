"""Acknowledgement files: what a client was told was persisted, for the checker.

One JSON object per line: ``{"message_id": <hex of the id's bytes>, "time_tick": N,
"digest": <sha256 hex of the payload>}``. Appending lines is crash-safe enough for a
test client: a torn last line is reported, not silently dropped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from streamwal.errors import InvalidInputError

__all__ = [
    "TXN_ENDED",
    "Ack",
    "Delivery",
    "Failure",
    "TxnOutcome",
    "TxnRecord",
    "digest",
    "read_acks",
    "write_acks",
]


def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


@dataclass(frozen=True)
class Ack:
    message_id: bytes
    time_tick: int
    digest: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "message_id": self.message_id.hex(),
                "time_tick": self.time_tick,
                "digest": self.digest,
            }
        )


@dataclass(frozen=True)
class Delivery:
    """A message a reader of the whole channel was handed: its id and its payload's
    digest, what the checker holds against the log (a reader that hands over part of
    a chunked message, or another payload, delivers something nobody wrote)."""

    message_id: bytes
    digest: str


@dataclass(frozen=True)
class Failure:
    """A failed append: its payload's digest and what the answer said of the log
    (``"not-written"`` or ``"unknown"``, :class:`streamwal.errors.WriteOutcome` values)."""

    digest: str
    outcome: str


class TxnOutcome:
    """What a client was told of a transaction (:attr:`TxnRecord.outcome`)."""

    COMMITTED = "committed"
    """The commit was acknowledged: delivered whole, once."""
    UNKNOWN = "unknown"
    """The commit's outcome is unknown: delivered whole or not at all."""
    ROLLED_BACK = "rolled-back"
    """The rollback was acknowledged."""
    EXPIRED = "expired"
    """The owner answered that it outlived its keepalive and was rolled back."""
    ABORTED = "aborted"
    """The owner answered that it cannot commit (ended, not open there, an append of
    unknown outcome): a :class:`~streamwal.errors.TransactionError`, not written."""
    ABANDONED = "abandoned"
    """No commit of it can have reached an owner and its rollback failed: it expires."""


TXN_ENDED = frozenset(
    {TxnOutcome.ROLLED_BACK, TxnOutcome.EXPIRED, TxnOutcome.ABORTED, TxnOutcome.ABANDONED}
)
"""Outcomes after which nothing of the transaction may ever be delivered."""


@dataclass(frozen=True)
class TxnRecord:
    """One transaction as its client saw it: the checker holds the log and a reader to
    it (``txn_id`` is the id the owner answered, the time tick of its begin)."""

    txn_id: int
    outcome: str
    commit: Ack | None = None
    """Where the acknowledged commit landed (``outcome`` committed)."""
    members: tuple[Ack, ...] = ()
    """The appends into it that were acknowledged."""


def write_acks(path: Path, acks: Iterable[Ack]) -> None:
    with open(path, "a") as out:
        for ack in acks:
            out.write(ack.to_json() + "\n")


def read_acks(path: Path) -> Iterator[Ack]:
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                yield Ack(bytes.fromhex(raw["message_id"]), int(raw["time_tick"]), raw["digest"])
            except (ValueError, KeyError, TypeError) as exc:
                raise InvalidInputError(f"{path}:{number}: not an acknowledgement: {exc}") from exc
