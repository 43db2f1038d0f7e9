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

__all__ = ["Ack", "Failure", "digest", "read_acks", "write_acks"]


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
class Failure:
    """A failed append: its payload's digest and what the answer said of the log
    (``"not-written"`` or ``"unknown"``, :class:`streamwal.errors.WriteOutcome` values)."""

    digest: str
    outcome: str


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
