"""The history checker: what must hold of a channel's log, checked from the log alone.

It reads raw backend entries (not through the WAL, so a WAL bug cannot hide itself)
and checks:

1. time ticks of decodable messages strictly increase in log order;
2. every owner starts with a TimeTick that confirms itself (its first time tick);
   a change of source node without one is a violation;
3. after an owner's first message, no message of an earlier owner appears;
4. every acknowledgement a client recorded is in the log at its message id, with the
   same time tick and payload digest, and its payload is persisted exactly once
   (clients that record acknowledgements give each append a unique payload, so a
   second copy means an append was persisted twice).

Foreign or undecodable entries are counted and listed, never fatal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from node.acks import Ack, digest
from wal.backend import BackendMessage
from wal.errors import DecodeError
from wal.message import MessageIdDecoder, MessageType, decode

__all__ = ["HistoryReport", "Violation", "check_history"]


@dataclass(frozen=True)
class Violation:
    rule: str
    message_id: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] at {self.message_id}: {self.detail}"


@dataclass
class HistoryReport:
    messages: int = 0
    decoded: int = 0
    owners: list[tuple[int, str]] = field(default_factory=list)  # (node id, first id)
    foreign: list[str] = field(default_factory=list)
    acks_checked: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        lines = [
            f"messages: {self.messages} ({self.decoded} streamwal, {len(self.foreign)} foreign)",
            "owners: "
            + (", ".join(f"node {n} from {m}" for n, m in self.owners) if self.owners else "none"),
            f"acknowledgements checked: {self.acks_checked}",
            f"violations: {len(self.violations)}",
        ]
        lines += [f"  {v}" for v in self.violations[:20]]
        if len(self.violations) > 20:
            lines.append(f"  ... and {len(self.violations) - 20} more")
        if self.foreign:
            lines.append("foreign or undecodable: " + ", ".join(self.foreign[:20]))
        return "\n".join(lines)


def check_history(
    entries: Iterable[BackendMessage],
    message_id_from_bytes: MessageIdDecoder,
    acks: Iterable[Ack] = (),
) -> HistoryReport:
    report = HistoryReport()
    last_tt: int | None = None
    last_tt_id = ""
    owner: int | None = None
    past_owners: set[int] = set()
    seen: dict[bytes, tuple[int, str]] = {}
    copies: dict[str, int] = {}
    for raw in entries:
        report.messages += 1
        text_id = str(raw.message_id)
        try:
            msg = decode(raw, message_id_from_bytes)
        except DecodeError:
            report.foreign.append(text_id)
            continue
        report.decoded += 1
        payload_digest = digest(msg.payload)
        seen[raw.message_id.to_bytes()] = (msg.time_tick, payload_digest)
        copies[payload_digest] = copies.get(payload_digest, 0) + 1
        if last_tt is not None and msg.time_tick <= last_tt:
            report.violations.append(
                Violation(
                    "time-tick-order",
                    text_id,
                    f"time tick {msg.time_tick} is not above {last_tt} (at {last_tt_id})",
                )
            )
        last_tt, last_tt_id = max(last_tt or 0, msg.time_tick), text_id
        first_tick = msg.type is MessageType.TIME_TICK and msg.last_confirmed == msg.message_id
        if first_tick:
            if owner is not None:
                past_owners.add(owner)
            owner = msg.source
            past_owners.discard(owner)
            report.owners.append((msg.source, text_id))
        elif owner is None or msg.source != owner:
            rule = "stale-owner" if msg.source in past_owners else "owner-start"
            detail = (
                f"node {msg.source} wrote after node {owner} took over"
                if rule == "stale-owner"
                else f"node {msg.source} wrote without a first time tick"
            )
            report.violations.append(Violation(rule, text_id, detail))
    for ack in acks:
        report.acks_checked += 1
        found = seen.get(ack.message_id)
        ack_id = ack.message_id.hex()
        try:
            ack_id = str(message_id_from_bytes(ack.message_id))
        except DecodeError:
            pass
        if found is None:
            report.violations.append(Violation("ack", ack_id, "acknowledged message is missing"))
        elif found != (ack.time_tick, ack.digest):
            report.violations.append(
                Violation("ack", ack_id, "acknowledged message differs (time tick or payload)")
            )
        elif copies[ack.digest] != 1:
            report.violations.append(
                Violation("ack", ack_id, f"payload persisted {copies[ack.digest]} times")
            )
    return report
