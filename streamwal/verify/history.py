"""The history checker: what must hold of a channel's log, checked from the log alone.

It reads raw backend entries (not through the WAL, so a WAL bug cannot hide itself)
and checks, in log order:

1. ``time-tick-order``: time ticks of decodable messages strictly increase;
2. ``first-time-tick``: an owner's first message (a TimeTick that confirms itself) is
   above everything before it; ``owner-start``: a node that writes without having
   started with such a first time tick (the log's first message included);
3. ``stale-owner``: after an owner's first message, nothing written by an earlier
   ownership appears: neither a message of another node that owned the channel
   before, nor one of this same node from an earlier ownership (its last-confirmed
   id lies before the current owner's first message: every message of an ownership
   confirms that ownership's first time tick or something after it);
4. acknowledgements a client recorded (message id, time tick, payload digest):
   ``ack-missing`` (no streamwal message at that id), ``ack-changed`` (a different
   time tick or payload there), ``ack-duplicated`` (the payload is persisted more
   than once: clients that record acknowledgements give each append a unique
   payload, so a second copy means an append was persisted twice),
   ``ack-position-shared`` (two acknowledgements of different payloads name one
   position: a later append was answered with an earlier one's result, as when a
   client hands back the number of an append that did land and reuses it; the log
   holds one of them at most, so the other is acknowledged and never written).
5. failed appends a client recorded (payload digest, outcome): ``not-written-persisted``
   when an append answered "not written" is in the log (a client that retried it
   would have written it twice); appends answered "unknown" are counted, with how many
   of them are in the log.

6. batches a client recorded (each batch's payload digests, in its order):
   ``batch-split`` when the messages of one batch that are in the log are not next to
   each other, in the batch's order (``ProduceBatch`` promises that nothing else
   enters the log between them; a batch that failed part way may miss messages, but
   those that landed still sit together).

7. messages a reader of the whole channel was handed (``deliveries``: id and payload
   digest): ``delivered-changed`` when one is not the log's whole message at its id
   (no whole message there: part of a chunked message cut before its last chunk, or
   nothing; or another payload, a chunked message rebuilt wrong), and
   ``ack-undelivered`` when an acknowledged message is not among them (a reader that
   dropped a whole chunked message as if it were unfinished).

8. the exactly-once rules of :mod:`streamwal.verify.transactions`: a retried idempotent
   append persisted twice, a committed transaction that is incomplete, a message of a
   transaction that is not open; and, given the ids a reader ``delivered``, a
   transaction delivered without its commit, in part or twice; given what clients
   were told of their transactions (``txns``), a commit acknowledged and not in the
   log whole, or not delivered, and a transaction rolled back or expired that
   commits or is delivered.

A truncated log (``truncated_before``) is checked from its truncation point: entries
before it are not read (the broker may not have deleted them yet), acknowledgements
before it are counted as truncated, not missing, and the first kept message continues
an ownership that began before the point. A gap inside the kept range is still
``ack-missing``.

Foreign or undecodable entries are counted and listed, never fatal; an
acknowledgement pointing at one is ``ack-changed``. ``acked_violations`` counts the
violations that touch an acknowledged message (every ``ack-*`` one, and a log rule
broken at an acknowledged id): a log can hold a message no client was told was
persisted (a failed append may still land), and such a message breaking a rule is
still a violation, but a different one from an acknowledged message breaking it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from streamwal.errors import DecodeError, WriteOutcome
from streamwal.verify.acks import Ack, Delivery, Failure, TxnRecord, digest
from streamwal.verify.transactions import TXN_RULES, check_exactly_once
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message import ImmutableMessage, MessageIdDecoder, MessageType, decode
from streamwal.wal.message_id import MessageId

__all__ = ["RULES", "HistoryReport", "Violation", "check_history"]

RULES = (
    "time-tick-order",
    "first-time-tick",
    "owner-start",
    "stale-owner",
    "ack-missing",
    "ack-changed",
    "ack-duplicated",
    "ack-position-shared",
    "not-written-persisted",
    "batch-split",
    "delivered-changed",
    "ack-undelivered",
    *TXN_RULES,
)
"""Every rule name a :class:`Violation` can carry."""

_SHOWN = 20  # violations and foreign ids printed in a summary


@dataclass(frozen=True)
class Violation:
    rule: str
    message_id: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] at {self.message_id}: {self.detail}"


@dataclass
class HistoryReport:
    """The outcome of one check; ``ok`` when there is no violation."""

    messages: int = 0
    decoded: int = 0
    owners: list[tuple[int, str]] = field(default_factory=list)  # (node id, first id)
    foreign: list[str] = field(default_factory=list)
    acks_checked: int = 0
    #: acknowledgements before the truncation point (not checked: truncated)
    acks_truncated: int = 0
    truncated_before: str | None = None
    violations: list[Violation] = field(default_factory=list)
    acked_violations: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    """Failed appends checked, by outcome."""
    failures_in_log: dict[str, int] = field(default_factory=dict)
    """Of those, the ones whose payload is in the log, by outcome."""
    idempotent: int = 0
    """Messages with a producer id and sequence number."""
    transactions: dict[str, int] = field(default_factory=dict)
    """Transactions by how they ended (committed, rolled-back, cut, open)."""
    txn_outcomes: dict[str, int] = field(default_factory=dict)
    """Transactions clients recorded, by what they were told."""
    txn_outcomes_committed: dict[str, int] = field(default_factory=dict)
    """Of those, the ones the log commits, by what the client was told."""
    deliveries_checked: int = 0
    """Messages a reader was handed, held against the log (``deliveries``)."""

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def first_offending_ids(self) -> list[str]:
        """The message ids of the violations, first occurrence first, without repeats."""
        return list(dict.fromkeys(v.message_id for v in self.violations))

    def by_rule(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for v in self.violations:
            counts[v.rule] = counts.get(v.rule, 0) + 1
        return counts

    def summary(self) -> str:
        lines = [
            f"messages: {self.messages} ({self.decoded} streamwal, {len(self.foreign)} foreign)",
            "owners: "
            + (", ".join(f"node {n} from {m}" for n, m in self.owners) if self.owners else "none"),
            f"acknowledgements checked: {self.acks_checked}"
            + (
                f" ({self.acks_truncated} before the truncation point {self.truncated_before})"
                if self.truncated_before
                else ""
            ),
            "failed appends: "
            + (
                ", ".join(
                    f"{n} {kind} ({self.failures_in_log.get(kind, 0)} in the log)"
                    for kind, n in sorted(self.failures.items())
                )
                or "none recorded"
            ),
            f"idempotent appends: {self.idempotent}; transactions: "
            + (", ".join(f"{n} {how}" for how, n in sorted(self.transactions.items())) or "none"),
            "transactions clients recorded: "
            + (
                ", ".join(
                    f"{n} {told} ({self.txn_outcomes_committed.get(told, 0)} committed in the log)"
                    for told, n in sorted(self.txn_outcomes.items())
                )
                or "none"
            ),
            f"violations: {len(self.violations)}"
            + (
                " (" + ", ".join(f"{r}: {n}" for r, n in self.by_rule().items()) + "; "
                f"{self.acked_violations} on acknowledged messages)"
                if self.violations
                else ""
            ),
        ]
        if self.violations:
            lines.append("first offending message ids: " + ", ".join(self.first_offending_ids[:10]))
        lines += [f"  {v}" for v in self.violations[:_SHOWN]]
        if len(self.violations) > _SHOWN:
            lines.append(f"  ... and {len(self.violations) - _SHOWN} more")
        if self.foreign:
            more = len(self.foreign) - _SHOWN
            lines.append(
                f"foreign or undecodable ({len(self.foreign)}): "
                + ", ".join(self.foreign[:_SHOWN])
                + (f" ... and {more} more" if more > 0 else "")
            )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "messages": self.messages,
            "decoded": self.decoded,
            "owners": [{"node": n, "first_message_id": m} for n, m in self.owners],
            "foreign": list(self.foreign),
            "acks_checked": self.acks_checked,
            "acks_truncated": self.acks_truncated,
            "truncated_before": self.truncated_before,
            "acked_violations": self.acked_violations,
            "failures": dict(self.failures),
            "failures_in_log": dict(self.failures_in_log),
            "idempotent": self.idempotent,
            "transactions": dict(self.transactions),
            "txn_outcomes": dict(self.txn_outcomes),
            "txn_outcomes_committed": dict(self.txn_outcomes_committed),
            "deliveries_checked": self.deliveries_checked,
            "violations": [
                {"rule": v.rule, "message_id": v.message_id, "detail": v.detail}
                for v in self.violations
            ],
            "first_offending_ids": self.first_offending_ids,
        }


@dataclass
class _Ownership:
    node: int
    first_id: MessageId
    first_text: str


def check_history(
    entries: Iterable[BackendMessage],
    message_id_from_bytes: MessageIdDecoder,
    acks: Iterable[Ack] = (),
    failures: Iterable[Failure] = (),
    truncated_before: MessageId | None = None,
    delivered: Iterable[bytes] | None = None,
    batches: Iterable[Sequence[str]] = (),
    txns: Iterable[TxnRecord] = (),
    deliveries: Iterable[Delivery] | None = None,
) -> HistoryReport:
    """Check ``entries`` (the whole log, in order, chunked messages rebuilt),
    ``acks``, ``failures``, ``batches``, ``txns`` and ``deliveries`` against it; see
    the module. ``truncated_before``: the channel's truncation point, if it was
    truncated. ``delivered``: the message ids a reader of the whole channel delivered
    (transaction rules); ``deliveries``: what such a reader was handed, with payload
    digests (``delivered-changed``, ``ack-undelivered``).
    """
    report = HistoryReport()
    if truncated_before is not None:
        report.truncated_before = str(truncated_before)
    last_tt: int | None = None
    last_tt_id = ""
    current: _Ownership | None = None
    past_nodes: set[int] = set()
    seen: dict[bytes, tuple[int, str]] = {}
    foreign_ids: set[bytes] = set()
    copies: dict[str, int] = {}
    decoded: list[ImmutableMessage] = []
    positions: dict[str, tuple[int, str]] = {}  # payload digest -> (entry index, id)
    for raw in entries:
        if truncated_before is not None and raw.message_id < truncated_before:
            continue  # gone, or about to be: not part of the log any more
        report.messages += 1
        text_id = str(raw.message_id)
        try:
            msg = decode(raw, message_id_from_bytes)
        except DecodeError:
            report.foreign.append(text_id)
            foreign_ids.add(raw.message_id.to_bytes())
            continue
        report.decoded += 1
        decoded.append(msg)
        payload_digest = digest(msg.payload)
        seen[raw.message_id.to_bytes()] = (msg.time_tick, payload_digest)
        if not msg.type.is_txn_marker:  # a marker's payload is a count, not a client's
            copies[payload_digest] = copies.get(payload_digest, 0) + 1
            positions[payload_digest] = (report.messages, text_id)
        first_tick = msg.type is MessageType.TIME_TICK and msg.last_confirmed == msg.message_id
        if last_tt is not None and msg.time_tick <= last_tt:
            rule = "first-time-tick" if first_tick else "time-tick-order"
            what = f"node {msg.source}'s first time tick" if first_tick else "time tick"
            report.violations.append(
                Violation(
                    rule,
                    text_id,
                    f"{what} {msg.time_tick} is not above {last_tt} (at {last_tt_id})",
                )
            )
        if last_tt is None or msg.time_tick > last_tt:
            last_tt, last_tt_id = msg.time_tick, text_id
        if first_tick:
            if current is not None:
                past_nodes.add(current.node)
            past_nodes.discard(msg.source)
            current = _Ownership(msg.source, msg.message_id, text_id)
            report.owners.append((msg.source, text_id))
            continue
        if current is None and truncated_before is not None:
            # the log starts at the truncation point, inside an ownership that began
            # before it: that ownership confirms this message's last-confirmed id
            current = _Ownership(msg.source, msg.last_confirmed, f"before {truncated_before}")
        violation = _owner_violation(msg.source, msg.last_confirmed, current, past_nodes)
        if violation is not None:
            report.violations.append(Violation(violation[0], text_id, violation[1]))
    exactly_once = check_exactly_once(
        decoded, delivered, truncated=truncated_before is not None, records=txns
    )
    report.idempotent = exactly_once.idempotent
    report.transactions = exactly_once.transactions
    report.txn_outcomes = exactly_once.txn_outcomes
    report.txn_outcomes_committed = exactly_once.txn_outcomes_committed
    report.violations.extend(Violation(*v) for v in exactly_once.violations)
    log_violations = len(report.violations)
    acked_ids: set[str] = set()
    acks = list(acks)
    report.violations.extend(_shared_positions(acks, message_id_from_bytes))
    for ack in acks:
        if truncated_before is not None and _before(ack, truncated_before, message_id_from_bytes):
            report.acks_truncated += 1
            continue
        report.acks_checked += 1
        found = seen.get(ack.message_id)
        ack_id = _readable(ack.message_id, message_id_from_bytes)
        acked_ids.add(ack_id)
        if found is None:
            if ack.message_id in foreign_ids:
                report.violations.append(
                    Violation("ack-changed", ack_id, "acknowledged id holds a foreign entry")
                )
            else:
                report.violations.append(
                    Violation("ack-missing", ack_id, "acknowledged message is not in the log")
                )
        elif found != (ack.time_tick, ack.digest):
            time_tick, payload_digest = found
            changes: list[str] = []
            if time_tick != ack.time_tick:
                changes.append(f"time tick {time_tick}, acknowledged {ack.time_tick}")
            if payload_digest != ack.digest:
                changes.append("another payload")
            report.violations.append(
                Violation("ack-changed", ack_id, "the log holds " + " and ".join(changes))
            )
        elif copies[ack.digest] != 1:
            report.violations.append(
                Violation("ack-duplicated", ack_id, f"payload persisted {copies[ack.digest]} times")
            )
    report.acked_violations = (
        len(report.violations)
        - log_violations
        + sum(1 for v in report.violations[:log_violations] if v.message_id in acked_ids)
    )
    if deliveries is not None:
        handed = list(
            _delivery_violations(
                report, deliveries, acks, seen, truncated_before, message_id_from_bytes
            )
        )
        report.violations.extend(handed)
        report.acked_violations += sum(1 for v in handed if v.message_id in acked_ids)
    for failure in failures:
        report.failures[failure.outcome] = report.failures.get(failure.outcome, 0) + 1
        if failure.digest not in copies:
            continue
        report.failures_in_log[failure.outcome] = report.failures_in_log.get(failure.outcome, 0) + 1
        if failure.outcome == WriteOutcome.NOT_WRITTEN.value:
            report.violations.append(
                Violation(
                    "not-written-persisted",
                    failure.digest[:16],
                    "an append answered 'not written' is in the log",
                )
            )
    report.violations.extend(_batch_violations(batches, positions, copies))
    return report


def _delivery_violations(
    report: HistoryReport,
    deliveries: Iterable[Delivery],
    acks: Sequence[Ack],
    seen: dict[bytes, tuple[int, str]],
    truncated_before: MessageId | None,
    message_id_from_bytes: MessageIdDecoder,
) -> Iterable[Violation]:
    """``delivered-changed`` per delivery that is not the log's whole message at its
    id; ``ack-undelivered`` per acknowledged message (after the truncation point)
    that no delivery names."""
    handed: set[bytes] = set()
    for delivery in deliveries:
        point = Ack(delivery.message_id, 0, delivery.digest)
        if truncated_before is not None and _before(point, truncated_before, message_id_from_bytes):
            continue
        report.deliveries_checked += 1
        handed.add(delivery.message_id)
        found = seen.get(delivery.message_id)
        where = _readable(delivery.message_id, message_id_from_bytes)
        if found is None:
            yield Violation(
                "delivered-changed",
                where,
                "delivered, yet the log holds no whole message at this id (a chunked "
                "message cut before its last chunk, or nothing)",
            )
        elif found[1] != delivery.digest:
            yield Violation(
                "delivered-changed", where, "delivered with a payload other than the log's"
            )
    for ack in acks:
        if truncated_before is not None and _before(ack, truncated_before, message_id_from_bytes):
            continue
        if ack.message_id not in handed:
            yield Violation(
                "ack-undelivered",
                _readable(ack.message_id, message_id_from_bytes),
                "acknowledged, and a reader of the whole channel was not handed it",
            )


def _shared_positions(
    acks: Sequence[Ack], message_id_from_bytes: MessageIdDecoder
) -> Iterable[Violation]:
    """``ack-position-shared``: one per position acknowledged to appends of different
    payloads (the same append acknowledged twice, by a retry, is one payload)."""
    payloads: dict[bytes, set[str]] = {}
    for ack in acks:
        payloads.setdefault(ack.message_id, set()).add(ack.digest)
    for message_id, digests in payloads.items():
        if len(digests) > 1:
            yield Violation(
                "ack-position-shared",
                _readable(message_id, message_id_from_bytes),
                f"{len(digests)} appends of different payloads acknowledged at this position",
            )


def _batch_violations(
    batches: Iterable[Sequence[str]],
    positions: dict[str, tuple[int, str]],
    copies: dict[str, int],
) -> Iterable[Violation]:
    """``batch-split``: one per batch whose messages in the log are not consecutive
    entries in the batch's order (a payload persisted twice is ``ack-duplicated``'s
    matter, not this rule's)."""
    for batch in batches:
        landed = [positions[d] for d in batch if copies.get(d) == 1]
        for (before, _), (at, text_id) in pairwise(landed):
            if at != before + 1:
                yield Violation(
                    "batch-split",
                    text_id,
                    f"a batch's next message is entry {at - before:+d} from the one before "
                    "it, not the entry right after it",
                )
                break


def _owner_violation(
    source: int, last_confirmed: MessageId, current: _Ownership | None, past_nodes: set[int]
) -> tuple[str, str] | None:
    if current is None:
        return "owner-start", f"node {source} wrote before any first time tick"
    if source != current.node:
        if source in past_nodes:
            return "stale-owner", f"node {source} wrote after node {current.node} took over"
        return "owner-start", f"node {source} wrote without a first time tick"
    if last_confirmed < current.first_id:
        return (
            "stale-owner",
            f"node {source} wrote from an earlier ownership (confirms {last_confirmed}, "
            f"before its first time tick at {current.first_text})",
        )
    return None


def _before(ack: Ack, point: MessageId, message_id_from_bytes: MessageIdDecoder) -> bool:
    try:
        return message_id_from_bytes(ack.message_id) < point
    except DecodeError:
        return False


def _readable(message_id: bytes, message_id_from_bytes: MessageIdDecoder) -> str:
    try:
        return str(message_id_from_bytes(message_id))
    except DecodeError:
        return message_id.hex()
