"""The history checker: what must hold of a channel's log, checked from the log alone.

It stays whole past 500 lines because it is one role, the rules of one pass over the log:
splitting the rules from the checker that feeds them would spread one state across modules.

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
   ``term-decreased``: a message's term is below an earlier message's (Milvus: terms
   only grow in message-id order); ``term-without-owner-start``: a message's term is
   above every earlier one and it is not an owner's first time tick (a WAL record),
   so the first message of each term is its owner's first time tick. A term of 0 is
   unknown (format v1, or a log written before terms) and exempt from both; so is the
   first known term of an ownership whose first time tick had none (a channel whose
   owner moved from v1 to v2 while it wrote);
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
   nothing; or another payload, a chunked message rebuilt wrong),
   ``delivered-out-of-order`` when one is not after the one before it in the log (handed
   twice, or out of log order), ``delivered-skipped`` for a message of the log between
   the first and the last delivered that the reader was not handed, and
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

Streaming: :class:`HistoryChecker` is fed the log one entry at a time, in log order,
then :meth:`HistoryChecker.finish` checks what clients recorded against it. Its
memory is bounded by the channel's owners and open transactions, never by the log's
length: the last time tick, the current ownership, the node ids of past owners,
counters, and the first :data:`KEEP` violations, owners and foreign ids for display
(with their totals). Every per-message digest (id -> time tick and payload digest,
payload copies and positions, idempotent pairs, transaction members) and every
violation goes to an on-disk :class:`~streamwal.verify.store.Store`, and the rules
that need the whole log are queries on it. ``docs/verify.md`` lists, per rule, what
is kept where. :func:`check_history` feeds an iterable through it.

Entries are decoded by :func:`decode_entry`, the one place that knows the log's
formats: v1 and v2 of ``docs/wire-format.md``, told apart per entry, so a channel
begun in v1 and continued in v2 is checked whole. A v2 entry may hold a pack of
several messages, each checked as one message at its own id; an entry of a newer
format ends the check with :class:`~streamwal.errors.UnsupportedLogFormatError`
instead of being counted foreign. The rules read each message's
:data:`~streamwal.verify.facts.Facts` (:func:`entry_facts`: a few fields, no message
object), so that the decoding can run in another process
(:mod:`streamwal.verify.pipeline`); v1's plain entries and v2's packs take fast paths
beside :func:`decode_entry` that check what it checks (a v2 pack read from its
``struct`` fields, payloads only hashed), and anything else goes through it.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeGuard

from streamwal.errors import DecodeError, InvalidInputError, WriteOutcome
from streamwal.verify.acks import Ack, Delivery, Failure, TxnRecord
from streamwal.verify.facts import Facts
from streamwal.verify.store import Store
from streamwal.verify.transactions import TXN_RULES, ExactlyOnceChecker
from streamwal.wal.backend import BackendMessage
from streamwal.wal.interceptors.txn.session import parse_decimal_payload
from streamwal.wal.message import ImmutableMessage, MessageIdDecoder, MessageType
from streamwal.wal.message import decode_entry as _decode_entry
from streamwal.wal.message.codec_v1 import (
    KEY_LAST_CONFIRMED,
    KEY_PRODUCER,
    KEY_SEQUENCE,
    KEY_SOURCE,
    KEY_TIME_TICK,
    KEY_TXN,
    KEY_TYPE,
    KEY_VCHANNEL,
    KEY_VERSION,
    V1_CALLER_TYPES,
)
from streamwal.wal.message.frame import (
    FLAG_HAS_PRODUCER,
    FLAG_HAS_TXN,
    FLAG_WAL_RECORD,
    FORMAT_PROPERTY,
    KIND_PACK,
    MAGIC,
    MESSAGE_HEADER,
    PACK_HEADER,
    ROLE_BEGIN,
    ROLE_COMMIT,
    ROLE_MEMBER,
    ROLE_NONE,
    ROLE_ROLLBACK,
    V2,
)
from streamwal.wal.message.message import MAX_TIME_TICK, RESERVED_PREFIX
from streamwal.wal.message_id import MessageId

__all__ = [
    "KEEP",
    "RULES",
    "Facts",
    "HistoryChecker",
    "HistoryReport",
    "Violation",
    "check_history",
    "decode_entry",
    "entry_facts",
    "parts_facts",
]

RULES = (
    "time-tick-order",
    "first-time-tick",
    "owner-start",
    "stale-owner",
    "term-decreased",
    "term-without-owner-start",
    "ack-missing",
    "ack-changed",
    "ack-duplicated",
    "ack-position-shared",
    "not-written-persisted",
    "batch-split",
    "delivered-changed",
    "delivered-out-of-order",
    "delivered-skipped",
    "ack-undelivered",
    *TXN_RULES,
)
"""Every rule name a :class:`Violation` can carry."""

_SHOWN = 20  # violations and foreign ids printed in a summary
KEEP = 1000
"""Violations, owners and foreign ids a report holds in memory (the totals are counted)."""

#: the report's order of violations: log rules first (in log order), then the
#: exactly-once ones (see :mod:`streamwal.verify.transactions`), then the inputs' rules
_LOG, _SHARED, _ACKS, _DELIVERIES, _FAILURES, _BATCHES = 0, 4, 5, 6, 7, 8
_STATE_VERSION = 1


def decode_entry(
    raw: BackendMessage, message_id_from_bytes: MessageIdDecoder
) -> list[ImmutableMessage]:
    """The streamwal messages ``raw`` holds, in whichever format it was written;
    :class:`DecodeError` if none, ``UnsupportedLogFormatError`` for a newer format."""
    return _decode_entry(raw, message_id_from_bytes)


_KINDS = {t.wire_name: t for t in MessageType}
#: a caller's message in :data:`Facts` (its type is the caller's: the rules need not
#: know it), told apart from the WAL's records, whose wire names are never empty
CALLER = ""


def entry_facts(raw: BackendMessage, message_id_from_bytes: MessageIdDecoder) -> list[Facts]:
    """The :data:`Facts` of each message of ``raw``, as :func:`decode_entry` reads it
    (one for a v1 entry, a v2 pack's N; one with no type for a foreign entry)."""
    return parts_facts(
        raw.message_id.to_bytes(), raw.payload, raw.properties, message_id_from_bytes, raw
    )


def parts_facts(
    message_id: bytes,
    payload: bytes,
    properties: Mapping[str, str],
    message_id_from_bytes: MessageIdDecoder,
    raw: BackendMessage | None = None,
) -> list[Facts]:
    """:func:`entry_facts` of an entry given in parts (``message_id`` as bytes), so a
    reader builds no :class:`BackendMessage` for it unless it is needed (``raw``: the
    entry, if the caller has it).

    The wire format's plain entries (v1's properties, v2's packs) take a path that
    checks what :func:`decode_entry` checks and builds no message (decoding is most of
    what checking an entry costs);
    anything that path is not sure of goes through :func:`decode_entry`, which decides:
    so the fast path can only agree with it (``tests/verify`` holds them to it)."""
    try:
        if FORMAT_PROPERTY in properties:
            packed = _pack_facts(message_id, payload, properties, message_id_from_bytes)
            if packed is not None:
                return packed
        else:
            facts = _plain_facts(message_id, payload, properties, message_id_from_bytes)
            if facts is not None:
                return [facts]
    except Exception:  # anything odd is the full decoder's to judge
        pass
    if raw is None:
        raw = BackendMessage(message_id_from_bytes(message_id), payload, properties)
    try:
        msgs = decode_entry(raw, message_id_from_bytes)
    except DecodeError:
        return [(message_id, None, 0, b"", b"", 0, None, None, None, None, 0)]
    return [_facts_of(msg) for msg in msgs]


def _facts_of(msg: ImmutableMessage) -> Facts:
    kind = msg.type
    return (
        msg.message_id.to_bytes(),
        kind.wire_name if isinstance(kind, MessageType) else CALLER,
        msg.time_tick,
        hashlib.sha256(msg.payload).digest(),
        msg.last_confirmed.to_bytes(),
        msg.source,
        msg.producer_id,
        msg.sequence,
        msg.txn_id,
        parse_decimal_payload(msg.payload) if kind is MessageType.COMMIT_TXN else None,
        msg.term,
    )


def _decimal(text: object) -> TypeGuard[str]:
    """What the codec's ``_DECIMAL`` pattern matches: ``0``, or up to 20 ASCII digits
    without a leading zero."""
    return (
        type(text) is str
        and text.isdigit()
        and text.isascii()
        and len(text) <= 20
        and (text[0] != "0" or len(text) == 1)
    )


def _bounded(props: dict[str, Any], key: str) -> int | None:
    """An optional decimal property up to 2**64 - 1; ``ValueError`` if it is not one."""
    if key not in props:
        return None
    text = props[key]
    if not _decimal(text) or int(text) > MAX_TIME_TICK:
        raise ValueError(key)
    return int(text)


#: what a burst of entries shares, checked once: the last last-confirmed text (with
#: its decoder and id's bytes), and the last version and source texts
_last_confirmed: tuple[MessageIdDecoder, str, bytes] | None = None
_last_version_source: tuple[str, str] | None = None
_ALWAYS = 4  # the keys every entry has: type, version, time tick, source


def _plain_facts(
    message_id: bytes, payload: Any, props: Any, message_id_from_bytes: MessageIdDecoder
) -> Facts | None:
    """:data:`Facts` of an entry of the wire format (``docs/wire-format.md``) that
    :func:`decode` accepts, checked as it checks them; ``None`` (or an exception) when
    not sure: the caller asks :func:`decode_entry`."""
    global _last_confirmed, _last_version_source
    if type(props) is not dict or type(payload) is not bytes:
        return None
    name = props.get(KEY_TYPE)
    if type(name) is not str:
        return None
    kind = _KINDS.get(name)
    if kind is None and name not in V1_CALLER_TYPES:
        return None
    version, tick, source = props.get(KEY_VERSION), props.get(KEY_TIME_TICK), props.get(KEY_SOURCE)
    if type(version) is not str or type(source) is not str:
        return None
    if (version, source) != _last_version_source:
        if not (_decimal(version) and version != "0" and _decimal(source)):
            return None
        _last_version_source = (version, source)
    if not _decimal(tick):
        return None
    time_tick = int(tick)
    if time_tick > MAX_TIME_TICK:
        return None
    text = props.get(KEY_LAST_CONFIRMED)
    if text is None:
        if kind is not MessageType.TIME_TICK:
            return None
        confirmed = message_id
    else:
        last = _last_confirmed
        if last is not None and last[0] is message_id_from_bytes and last[1] == text:
            confirmed = last[2]
        else:
            if type(text) is not str or not text or len(text) % 2:
                return None
            confirmed = bytes.fromhex(text)  # ValueError: not hex (the caller falls back)
            if confirmed.hex() != text or not isinstance(  # lowercase, nothing between
                message_id_from_bytes(confirmed), MessageId
            ):
                return None
            _last_confirmed = (message_id_from_bytes, text, confirmed)
    producer = sequence = txn = None
    keys = _ALWAYS if text is None else _ALWAYS + 1
    if len(props) != keys:  # more than the keys read above: check the others
        keys = _ALWAYS + (KEY_LAST_CONFIRMED in props)
        if KEY_VCHANNEL in props:
            if type(props[KEY_VCHANNEL]) is not str:
                return None
            keys += 1
        if KEY_PRODUCER in props or KEY_SEQUENCE in props:
            producer, sequence = _bounded(props, KEY_PRODUCER), _bounded(props, KEY_SEQUENCE)
            if producer is None or sequence is None:
                return None
            keys += 2
        if KEY_TXN in props:
            txn = _bounded(props, KEY_TXN)
            keys += 1
        if len(props) != keys:  # user properties: strings, as decode wants them
            for key, value in props.items():
                if type(key) is not str or (
                    not key.startswith(RESERVED_PREFIX) and type(value) is not str
                ):
                    return None
    return (
        message_id,
        CALLER if kind is None else kind.wire_name,
        time_tick,
        hashlib.sha256(payload).digest(),
        confirmed,
        int(source),
        producer,
        sequence,
        txn,
        parse_decimal_payload(payload) if kind is MessageType.COMMIT_TXN else None,
        0,  # format v1: written before terms
    )


_PACK_START = MAGIC + bytes((V2, KIND_PACK))
_PACK_FIELDS = PACK_HEADER.unpack_from
_PACK_SIZE = PACK_HEADER.size
_MESSAGE_FIELDS = MESSAGE_HEADER.unpack_from
_MESSAGE_SIZE = MESSAGE_HEADER.size
_PROPERTY_LENGTHS = struct.Struct("<II").unpack_from
_UNKNOWN_FLAGS = ~(FLAG_WAL_RECORD | FLAG_HAS_PRODUCER | FLAG_HAS_TXN)
_ROLES = {
    MessageType.BEGIN_TXN: ROLE_BEGIN,
    MessageType.COMMIT_TXN: ROLE_COMMIT,
    MessageType.ROLLBACK_TXN: ROLE_ROLLBACK,
}
#: a WAL record's type as the frame holds it: its wire name and the transaction role
#: its frame must carry
_RECORDS = {t.wire_name.encode(): (t.wire_name, _ROLES.get(t, ROLE_NONE)) for t in MessageType}
_TIME_TICK = MessageType.TIME_TICK.wire_name
_COMMIT_TXN = MessageType.COMMIT_TXN.wire_name
#: callers' types seen to be UTF-8 (a log repeats a few); bounded, a caller may use many
_caller_types: set[bytes] = {name.encode() for name in V1_CALLER_TYPES}
_CALLER_TYPES_MAX = 4096
#: the last last-confirmed id of a pack: its decoder, its bytes in the frame, and the
#: decoded id's bytes (the entries of a burst share one)
_pack_confirmed: tuple[MessageIdDecoder, bytes, bytes] | None = None


def _pack_facts(
    message_id: bytes, data: Any, props: Any, message_id_from_bytes: MessageIdDecoder
) -> list[Facts] | None:
    """:data:`Facts` of each message of a log format v2 pack
    (:mod:`streamwal.wal.message.frame`), checked as :func:`decode_entry` checks it,
    from the frame's fixed fields: no message, no property map, no copy of a payload
    but the slice its digest reads. ``None`` (or an exception) when not sure: a chunk,
    another version, an unknown WAL record; the caller asks :func:`decode_entry`."""
    global _pack_confirmed
    if type(data) is not bytes or props.get(FORMAT_PROPERTY) != "2" or data[:5] != _PACK_START:
        return None
    _, _, _, pack_flags, lc_len, count, source, term = _PACK_FIELDS(data)
    if count < 1:
        return None
    offset = _PACK_SIZE
    confirmed: bytes | None = None
    if pack_flags & 0x01:  # has a last-confirmed id
        lc = data[offset : offset + lc_len]
        last = _pack_confirmed
        if last is not None and last[0] is message_id_from_bytes and last[1] == lc:
            confirmed = last[2]
        else:
            decoded = message_id_from_bytes(lc)
            if not isinstance(decoded, MessageId):
                return None
            confirmed = decoded.to_bytes()
            _pack_confirmed = (message_id_from_bytes, lc, confirmed)
    offset += lc_len
    size = len(data)
    if count * _MESSAGE_SIZE > size - offset:
        return None  # more messages than the frame holds: decode_entry says why
    own_ids = (
        [message_id] if count == 1 else message_id_from_bytes(message_id).pack_member_bytes(count)
    )
    sha256 = hashlib.sha256
    out: list[Facts] = []
    for index in range(count):
        (
            flags,
            role,
            _,
            version,
            time_tick,
            producer,
            sequence,
            txn,
            type_len,
            vc_len,
            prop_count,
            payload_len,
        ) = _MESSAGE_FIELDS(data, offset)
        offset += _MESSAGE_SIZE
        type_bytes = data[offset : offset + type_len]
        offset += type_len
        if flags & FLAG_WAL_RECORD:
            record = _RECORDS.get(type_bytes)
            if record is None:
                return None
            name, expected = record
        else:
            if type_bytes not in _caller_types:
                type_bytes.decode()  # UnicodeDecodeError: the caller falls back
                if len(_caller_types) < _CALLER_TYPES_MAX:
                    _caller_types.add(type_bytes)
            name = CALLER
            expected = ROLE_MEMBER if flags & FLAG_HAS_TXN else ROLE_NONE
        if vc_len:
            data[offset : offset + vc_len].decode()
            offset += vc_len
        for _ in range(prop_count):  # read only to check they are UTF-8, as decode does
            k_len, v_len = _PROPERTY_LENGTHS(data, offset)
            offset += 8
            data[offset : offset + k_len].decode()
            offset += k_len
            data[offset : offset + v_len].decode()
            offset += v_len
        end = offset + payload_len
        if (
            end > size
            or flags & _UNKNOWN_FLAGS
            or version < 1
            or time_tick > MAX_TIME_TICK
            or role != expected
        ):
            return None
        own = own_ids[index]
        if confirmed is None:  # only an owner's first time tick confirms itself
            if index or name != _TIME_TICK:
                return None
            confirmed = own
        payload = data[offset:end]
        offset = end
        has_producer = flags & FLAG_HAS_PRODUCER
        out.append(
            (
                own,
                name,
                time_tick,
                sha256(payload).digest(),
                confirmed,
                source,
                producer if has_producer else None,
                sequence if has_producer else None,
                txn if flags & FLAG_HAS_TXN else None,
                parse_decimal_payload(payload) if name == _COMMIT_TXN else None,
                term,
            )
        )
    if offset != size:
        return None
    return out


@dataclass(frozen=True)
class Violation:
    rule: str
    message_id: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] at {self.message_id}: {self.detail}"


@dataclass
class HistoryReport:
    """The outcome of one check; ``ok`` when there is no violation.

    ``violations``, ``owners`` and ``foreign`` hold the first :data:`KEEP` of each;
    ``violation_counts``, ``owners_count`` and ``foreign_count`` count them all."""

    messages: int = 0
    decoded: int = 0
    owners: list[tuple[int, str]] = field(default_factory=list)  # (node id, first id)
    owners_count: int = 0
    foreign: list[str] = field(default_factory=list)
    foreign_count: int = 0
    acks_checked: int = 0
    #: acknowledgements before the truncation point (not checked: truncated)
    acks_truncated: int = 0
    truncated_before: str | None = None
    started_at: str | None = None
    """Where a read that starts inside the log (``--from``, ``--since``) began."""
    violations: list[Violation] = field(default_factory=list)
    violation_counts: dict[str, int] = field(default_factory=dict)
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
    resumed_after: str | None = None
    """The last id of the run a checkpoint continued (this run checked what follows)."""
    last_id: str | None = None
    """The last entry read."""
    work_bytes: int = 0
    """What the on-disk store of digests took."""

    @property
    def ok(self) -> bool:
        return not self.violation_counts and not self.violations

    @property
    def violations_total(self) -> int:
        return sum(self.violation_counts.values()) or len(self.violations)

    @property
    def first_offending_ids(self) -> list[str]:
        """The message ids of the violations, first occurrence first, without repeats."""
        return list(dict.fromkeys(v.message_id for v in self.violations))

    def by_rule(self) -> dict[str, int]:
        if self.violation_counts:
            return dict(self.violation_counts)
        counts: dict[str, int] = {}
        for v in self.violations:
            counts[v.rule] = counts.get(v.rule, 0) + 1
        return counts

    def summary(self) -> str:
        total = self.violations_total
        foreign = max(self.foreign_count, len(self.foreign))
        owners = max(self.owners_count, len(self.owners))
        lines = [
            f"messages: {self.messages} ({self.decoded} streamwal, {foreign} foreign)"
            + (f", after {self.resumed_after}" if self.resumed_after else ""),
            "owners: "
            + (", ".join(f"node {n} from {m}" for n, m in self.owners) if self.owners else "none")
            + (f" ... {owners} in all" if owners > len(self.owners) else ""),
            f"acknowledgements checked: {self.acks_checked}"
            + (
                f" ({self.acks_truncated} before the truncation point {self.truncated_before})"
                if self.truncated_before
                else f" ({self.acks_truncated} before the start {self.started_at})"
                if self.started_at
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
            f"violations: {total}"
            + (
                " (" + ", ".join(f"{r}: {n}" for r, n in self.by_rule().items()) + "; "
                f"{self.acked_violations} on acknowledged messages)"
                if total
                else ""
            ),
        ]
        if self.violations:
            lines.append("first offending message ids: " + ", ".join(self.first_offending_ids[:10]))
        lines += [f"  {v}" for v in self.violations[:_SHOWN]]
        if total > _SHOWN:
            lines.append(f"  ... and {total - _SHOWN} more")
        if foreign:
            more = foreign - min(_SHOWN, len(self.foreign))
            lines.append(
                f"foreign or undecodable ({foreign}): "
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
            "owners_count": max(self.owners_count, len(self.owners)),
            "foreign": list(self.foreign),
            "foreign_count": max(self.foreign_count, len(self.foreign)),
            "acks_checked": self.acks_checked,
            "acks_truncated": self.acks_truncated,
            "started_at": self.started_at,
            "truncated_before": self.truncated_before,
            "acked_violations": self.acked_violations,
            "failures": dict(self.failures),
            "failures_in_log": dict(self.failures_in_log),
            "idempotent": self.idempotent,
            "transactions": dict(self.transactions),
            "txn_outcomes": dict(self.txn_outcomes),
            "txn_outcomes_committed": dict(self.txn_outcomes_committed),
            "deliveries_checked": self.deliveries_checked,
            "violations_total": self.violations_total,
            "violation_counts": self.by_rule(),
            "violations": [
                {"rule": v.rule, "message_id": v.message_id, "detail": v.detail}
                for v in self.violations
            ],
            "first_offending_ids": self.first_offending_ids,
            "resumed_after": self.resumed_after,
            "last_id": self.last_id,
            "work_bytes": self.work_bytes,
        }


@dataclass
class _Ownership:
    node: int
    first_id: MessageId
    first_text: str


def _key(hex_digest: str) -> bytes:
    """A recorded digest (sha256 hex) in the store's form (its bytes)."""
    try:
        return bytes.fromhex(hex_digest)
    except ValueError:
        return hex_digest.encode()  # matches nothing in the log, as it should


class HistoryChecker:
    """The history rules, fed one entry at a time in log order (see the module).

    ``store``: the file of a checkpoint's digests (kept), else a temporary one under
    ``work_dir``. Close it (or use it as a context manager) to free its store.
    ``starts_inside``: the entries fed begin inside the log (a read from an id or a
    time), so like a truncated log's the first continues an ownership, and perhaps a
    transaction, that began before it, and acknowledgements before it are not
    checked (counted with the truncated ones)."""

    def __init__(
        self,
        message_id_from_bytes: MessageIdDecoder,
        *,
        truncated_before: MessageId | None = None,
        store: Path | None = None,
        work_dir: Path | None = None,
        keep: int = KEEP,
        starts_inside: bool = False,
    ) -> None:
        self._decode_id = message_id_from_bytes
        self._truncated = truncated_before
        self._starts_inside = starts_inside
        self._from: MessageId | None = None  # the first entry read, when it starts inside
        self._store = Store(store, work_dir)
        self._keep = keep
        self.report = HistoryReport()
        if truncated_before is not None:
            self.report.truncated_before = str(truncated_before)
        self._run = 1
        self._pos = 0  # entries read, over every run of a checkpoint
        self._since = 0  # the position this run started at
        self._n = 0  # violations recorded, over every run
        self._last_id: bytes | None = None
        self._last_tt: int | None = None
        self._last_tt_id: bytes | str = ""  # made text only when a rule names it
        self._confirmed: bytes | None = None  # a last-confirmed id that passed
        self._current: _Ownership | None = None
        self._past_nodes: set[int] = set()
        self._top_term = 0  # the highest term read so far (0: none known)
        self._top_term_id: bytes | str = ""  # where it was first read
        self._owner_term = 0  # the current ownership's term (0: not known yet)
        self._eo = ExactlyOnceChecker(
            self._store, self._emit, truncated=truncated_before is not None or starts_inside
        )

    def __enter__(self) -> HistoryChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._store.close()

    @property
    def last_id(self) -> MessageId | None:
        """The last entry fed (a checkpoint's next run starts after it)."""
        return self._decode_id(self._last_id) if self._last_id is not None else None

    @property
    def messages(self) -> int:
        return self.report.messages

    def _emit(self, phase: int, pos: int, rule: str, text: str, detail: str) -> None:
        self._n += 1
        self._store.add("viol", (self._run, phase, pos, self._n, rule, text, detail))

    # ---- the log ------------------------------------------------------------------

    def feed(self, raw: BackendMessage) -> None:
        """Check one entry: the next in log order (chunked messages whole)."""
        if self._truncated is not None and raw.message_id < self._truncated:
            return  # gone, or about to be: not part of the log any more
        for facts in entry_facts(raw, self._decode_id):
            self._check(facts)

    def feed_facts(self, facts: Facts) -> None:
        """:meth:`feed` of a message already decoded by :func:`entry_facts` (by another
        process, say: reading and decoding then run beside the rules)."""
        if self._truncated is not None and self._decode_id(facts[0]) < self._truncated:
            return
        self._check(facts)

    def feed_many(self, batch: Sequence[Facts]) -> None:
        """:meth:`feed_facts` of each of ``batch``, in order. The usual message (a
        caller's, in time-tick order, of the current owner under its known term,
        confirming what the message before it confirmed, outside idempotence and
        transactions) is checked inline: what :meth:`_check` does for it, without its
        calls; any other goes through :meth:`_check`."""
        if self._truncated is not None:
            for facts in batch:
                self.feed_facts(facts)
            return
        report, add, check = self.report, self._store.add, self._check
        if self._starts_inside and self._from is None and batch:
            check(batch[0])  # the read's first message: where it started
            batch = batch[1:]
        for facts in batch:
            message_id, name, time_tick, digest, confirmed, source, producer, _, txn, _, term = (
                facts
            )
            current, last_tt = self._current, self._last_tt
            if (
                name == CALLER
                and producer is None
                and txn is None
                and current is not None
                and source == current.node
                and confirmed == self._confirmed
                and (last_tt is None or time_tick > last_tt)
                and (not term or (term == self._top_term and self._owner_term))
            ):
                self._last_id = message_id
                self._pos += 1
                report.messages += 1
                report.decoded += 1
                add("msg", (message_id, time_tick, digest, self._pos, True))
                self._last_tt, self._last_tt_id = time_tick, message_id
            else:
                check(facts)

    def _text(self, message_id: bytes | str) -> str:
        """An id as the report shows it (ids are kept as bytes until a rule names one)."""
        if isinstance(message_id, str):
            return message_id
        return _readable(message_id, self._decode_id)

    def _check(self, facts: Facts) -> None:
        message_id, name, time_tick, digest, confirmed, source, producer, _, txn, _, term = facts
        report = self.report
        if self._starts_inside and self._from is None:
            self._from = self._decode_id(message_id)
            self.report.started_at = str(self._from)
        self._last_id = message_id
        self._pos += 1
        pos = self._pos
        report.messages += 1
        if name is None:
            report.foreign_count += 1
            if len(report.foreign) < self._keep:
                report.foreign.append(self._text(message_id))
            self._store.add("foreign_entry", (message_id, pos))
            return
        report.decoded += 1
        kind = _KINDS.get(name)  # None: a caller's message
        # a marker's payload is a count, not a client's
        marker = kind is not None and kind.is_txn_marker
        self._store.add("msg", (message_id, time_tick, digest, pos, not marker))
        tick = kind is MessageType.TIME_TICK
        first_tick = tick and confirmed == message_id
        last_tt = self._last_tt
        if last_tt is not None and time_tick <= last_tt:
            rule = "first-time-tick" if first_tick else "time-tick-order"
            what = f"node {source}'s first time tick" if first_tick else "time tick"
            self._emit(
                _LOG,
                pos,
                rule,
                self._text(message_id),
                f"{what} {time_tick} is not above {last_tt} (at {self._text(self._last_tt_id)})",
            )
        else:
            self._last_tt, self._last_tt_id = time_tick, message_id
        if first_tick:
            self._owner_term = term
        if term:
            self._check_term(term, first_tick, kind, source, pos, message_id)
        # identity, not set membership: an enum member hashes in Python, per message
        if producer is not None or txn is not None or tick or kind is MessageType.BEGIN_TXN:
            self._eo.feed(facts, kind, pos, self._text(message_id))
        if first_tick:
            text_id = self._text(message_id)
            self._confirmed = None
            if self._current is not None:
                self._past_nodes.add(self._current.node)
            self._past_nodes.discard(source)
            self._current = _Ownership(source, self._decode_id(message_id), text_id)
            report.owners_count += 1
            if len(report.owners) < self._keep:
                report.owners.append((source, text_id))
            return
        if self._current is None and (self._truncated is not None or self._from is not None):
            # the log starts at the truncation point, inside an ownership that began
            # before it: that ownership confirms this message's last-confirmed id
            self._current = _Ownership(
                source, self._decode_id(confirmed), f"before {self._truncated or self._from}"
            )
            self._confirmed = None
        current = self._current
        same_node = current is not None and source == current.node
        if same_node and confirmed == self._confirmed:
            return  # what the message before it confirmed, and that passed: so does this
        violation = _owner_violation(source, self._decode_id(confirmed), current, self._past_nodes)
        if violation is not None:
            self._emit(_LOG, pos, violation[0], self._text(message_id), violation[1])
        elif same_node:
            self._confirmed = confirmed

    def _check_term(
        self,
        term: int,
        first_tick: bool,
        kind: MessageType | None,
        source: int,
        pos: int,
        message_id: bytes,
    ) -> None:
        """``term-decreased`` and ``term-without-owner-start`` of a message of a known
        term (see the module); each term change is flagged once, at its first message."""
        top = self._top_term
        if term < top:
            self._emit(
                _LOG,
                pos,
                "term-decreased",
                self._text(message_id),
                f"node {source} wrote under term {term}, below term {top} "
                f"(at {self._text(self._top_term_id)})",
            )
            return
        if term == top:
            if not self._owner_term:
                self._owner_term = term
            return
        if top and self._owner_term and not first_tick:
            what = "a caller's message" if kind is None else f"a {kind.wire_name} record"
            self._emit(
                _LOG,
                pos,
                "term-without-owner-start",
                self._text(message_id),
                f"node {source} began term {term} (after term {top}) with {what}, "
                "not with an owner's first time tick",
            )
        self._top_term, self._top_term_id = term, message_id
        self._owner_term = term

    # ---- the checkpoint -----------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a next run needs to continue after :attr:`last_id` as if the log were
        read in one go (the store's file holds the rest)."""
        current = self._current
        return {
            "version": _STATE_VERSION,
            "run": self._run,
            "pos": self._pos,
            "n": self._n,
            "last_id": self._last_id.hex() if self._last_id is not None else None,
            "last_tt": self._last_tt,
            "last_tt_id": self._text(self._last_tt_id),
            "current": None
            if current is None
            else [current.node, current.first_id.to_bytes().hex(), current.first_text],
            "past_nodes": sorted(self._past_nodes),
            "terms": [self._top_term, self._text(self._top_term_id), self._owner_term],
            "from": self._from.to_bytes().hex() if self._from is not None else None,
            "exactly_once": self._eo.state(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (:meth:`state` of the run before, on the same store):
        this run's report counts what it reads after that run's last id.
        :class:`InvalidInputError` if it is not such a state."""
        try:
            if state.get("version") != _STATE_VERSION:
                raise InvalidInputError(f"checkpoint version {state.get('version')!r}")
            decode_id = self._decode_id
            self._run = int(state["run"]) + 1
            self._pos = self._since = int(state["pos"])
            self._n = int(state["n"])
            last = state["last_id"]
            self._last_id = decode_id(bytes.fromhex(last)).to_bytes() if last is not None else None
            self._last_tt = None if state["last_tt"] is None else int(state["last_tt"])
            self._last_tt_id = str(state["last_tt_id"])
            current = state["current"]
            if current is not None:
                node, first, text = current
                self._current = _Ownership(int(node), decode_id(bytes.fromhex(first)), str(text))
            self._past_nodes = {int(n) for n in state["past_nodes"]}
            # a checkpoint saved before terms were checked knows none: the next term read
            # is taken as the first known one
            top, top_id, owner_term = state.get("terms", (0, "", 0))
            self._top_term, self._top_term_id = int(top), str(top_id)
            self._owner_term = int(owner_term)
            start = state["from"]
            if start is not None:
                self._from = decode_id(bytes.fromhex(start))
                self.report.started_at = str(self._from)
            self._eo.restore(state["exactly_once"])
        except (KeyError, TypeError, ValueError, DecodeError) as exc:
            raise InvalidInputError(f"not a verify checkpoint: {exc!r}") from exc
        self._store.forget_after(self._pos, self._run - 1)
        if self._last_id is not None:
            self.report.resumed_after = self._text(self._last_id)

    # ---- once the log is read -----------------------------------------------------

    def finish(
        self,
        acks: Iterable[Ack] = (),
        failures: Iterable[Failure] = (),
        batches: Iterable[Sequence[str]] = (),
        txns: Iterable[TxnRecord] = (),
        deliveries: Iterable[Delivery] | None = None,
        delivered: Iterable[bytes] | None = None,
    ) -> HistoryReport:
        """Check what clients recorded against the whole log read so far (a
        checkpoint's earlier runs included); the report of this run. Every input is
        streamed into the store, never held in a list."""
        store, report = self._store, self.report
        report.last_id = self._text(self._last_id) if self._last_id is not None else None
        store.execute("DELETE FROM viol WHERE phase >= 2")
        for table in ("ack", "delivery", "failure"):
            store.execute(f"DELETE FROM {table}")
        eo = self._eo.finish(delivered, txns, self._since)
        report.idempotent = eo.idempotent
        report.transactions = dict(eo.transactions)
        report.txn_outcomes = dict(eo.txn_outcomes)
        report.txn_outcomes_committed = dict(eo.txn_outcomes_committed)
        store.add_many("ack", self._ack_rows(acks))
        store.add_many(
            "failure", ((n, _key(f.digest), f.digest, f.outcome) for n, f in enumerate(failures))
        )
        failures_in = store.one("SELECT 1 FROM failure LIMIT 1")
        acks_in = store.one("SELECT 1 FROM ack LIMIT 1")
        batches = iter(batches)
        first_batch = next(batches, None)
        if acks_in or failures_in or first_batch is not None:
            self._copies()
        if acks_in:
            store.index("msg_id", "foreign_id", "ack_id", "ack_text")
            self._shared_positions()
            self._acks()
        if deliveries is not None:
            store.index("msg_id", "ack_id", "ack_text")
            self._deliveries(deliveries)
        if failures_in:
            self._failures()
        if first_batch is not None:
            self._batches([first_batch], batches)
        self._collect()
        report.work_bytes = store.size()
        return report

    def _ack_rows(self, acks: Iterable[Ack]) -> Iterable[tuple[Any, ...]]:
        report, point = self.report, self._start()
        for n, ack in enumerate(acks):
            truncated = point is not None and _before(ack.message_id, point, self._decode_id)
            if truncated:
                report.acks_truncated += 1
            else:
                report.acks_checked += 1
            text = _readable(ack.message_id, self._decode_id)
            yield (n, ack.message_id, text, ack.time_tick, _key(ack.digest), truncated)

    def _start(self) -> MessageId | None:
        """Where what is checked begins: the later of the truncation point and the
        first entry of a read that started inside the log."""
        if self._truncated is None or self._from is None:
            return self._truncated or self._from
        return max(self._truncated, self._from)

    def _copies(self) -> None:
        """Each payload's copies in the log, and where its last one is (markers left
        out): rebuilt at each finish, the log having grown."""
        store = self._store
        store.execute("DROP TABLE IF EXISTS copies")
        store.execute(
            "CREATE TABLE copies AS SELECT digest, COUNT(*) AS n, MAX(pos) AS pos, id "
            "FROM msg WHERE counted GROUP BY digest"
        )
        store.index("copies")

    def _shared_positions(self) -> None:
        """``ack-position-shared``: one per position acknowledged to appends of different
        payloads (the same append acknowledged twice, by a retry, is one payload)."""
        for text, payloads in self._store.rows(
            "SELECT MIN(text), COUNT(DISTINCT digest) FROM ack GROUP BY id "
            "HAVING COUNT(DISTINCT digest) > 1 ORDER BY MIN(n)"
        ):
            self._emit(
                _SHARED,
                0,
                "ack-position-shared",
                text,
                f"{payloads} appends of different payloads acknowledged at this position",
            )

    def _acks(self) -> None:
        for text, tt, want, time_tick, payload, copies, foreign in self._store.rows(
            """SELECT a.text, a.tt, a.digest, m.tt, m.digest, c.n,
                   EXISTS(SELECT 1 FROM foreign_entry f WHERE f.id = a.id)
               FROM ack a
               LEFT JOIN msg m ON m.rowid =
                   (SELECT rowid FROM msg WHERE id = a.id ORDER BY rowid DESC LIMIT 1)
               LEFT JOIN copies c ON c.digest = a.digest
               WHERE NOT a.truncated ORDER BY a.n"""
        ):
            if time_tick is None:
                if foreign:
                    self._emit(
                        _ACKS, 0, "ack-changed", text, "acknowledged id holds a foreign entry"
                    )
                else:
                    self._emit(
                        _ACKS, 0, "ack-missing", text, "acknowledged message is not in the log"
                    )
            elif (time_tick, payload) != (tt, want):
                changes: list[str] = []
                if time_tick != tt:
                    changes.append(f"time tick {time_tick}, acknowledged {tt}")
                if payload != want:
                    changes.append("another payload")
                self._emit(_ACKS, 0, "ack-changed", text, "the log holds " + " and ".join(changes))
            elif copies is not None and copies != 1:
                self._emit(_ACKS, 0, "ack-duplicated", text, f"payload persisted {copies} times")

    def _deliveries(self, deliveries: Iterable[Delivery]) -> None:
        """``delivered-changed`` per delivery that is not the log's whole message at its
        id; ``ack-undelivered`` per acknowledged message (after the truncation point)
        that no delivery names."""
        store, report, point = self._store, self.report, self._start()

        def rows() -> Iterable[tuple[Any, ...]]:
            for n, delivery in enumerate(deliveries):
                if point is not None and _before(delivery.message_id, point, self._decode_id):
                    continue
                report.deliveries_checked += 1
                yield (n, delivery.message_id, _key(delivery.digest))

        store.add_many("delivery", rows())
        store.index("delivery_id")
        # the msg table's rowids are in log order: a reader's deliveries must climb them
        first = last = None
        for message_id, want, payload, row in store.rows(
            """SELECT d.id, d.digest, m.digest, m.rowid FROM delivery d
               LEFT JOIN msg m ON m.rowid =
                   (SELECT rowid FROM msg WHERE id = d.id ORDER BY rowid DESC LIMIT 1)
               ORDER BY d.n"""
        ):
            where = _readable(message_id, self._decode_id)
            if row is not None:
                if last is not None and row <= last:
                    self._emit(
                        _DELIVERIES,
                        0,
                        "delivered-out-of-order",
                        where,
                        "delivered again, or before a message that comes ahead of it in the "
                        "log and was delivered first",
                    )
                else:
                    first, last = row if first is None else first, row
            if payload is None:
                self._emit(
                    _DELIVERIES,
                    0,
                    "delivered-changed",
                    where,
                    "delivered, yet the log holds no whole message at this id (a chunked "
                    "message cut before its last chunk, or nothing)",
                )
            elif payload != want:
                self._emit(
                    _DELIVERIES,
                    0,
                    "delivered-changed",
                    where,
                    "delivered with a payload other than the log's",
                )
        if first is not None:
            for (message_id,) in store.rows(
                "SELECT id FROM msg m WHERE m.rowid BETWEEN ? AND ? AND NOT EXISTS "
                "(SELECT 1 FROM delivery d WHERE d.id = m.id) ORDER BY m.rowid",
                (first, last),
            ):
                self._emit(
                    _DELIVERIES,
                    0,
                    "delivered-skipped",
                    _readable(message_id, self._decode_id),
                    "in the log between two messages the reader was handed, and not handed",
                )
        for (text,) in store.rows(
            "SELECT text FROM ack a WHERE NOT truncated AND NOT EXISTS "
            "(SELECT 1 FROM delivery d WHERE d.id = a.id) ORDER BY n"
        ):
            self._emit(
                _DELIVERIES,
                0,
                "ack-undelivered",
                text,
                "acknowledged, and a reader of the whole channel was not handed it",
            )

    def _failures(self) -> None:
        report = self.report
        for hex_digest, outcome, copies in self._store.rows(
            "SELECT f.hex, f.outcome, c.n FROM failure f "
            "LEFT JOIN copies c ON c.digest = f.digest ORDER BY f.n"
        ):
            report.failures[outcome] = report.failures.get(outcome, 0) + 1
            if copies is None:
                continue
            report.failures_in_log[outcome] = report.failures_in_log.get(outcome, 0) + 1
            if outcome == WriteOutcome.NOT_WRITTEN.value:
                self._emit(
                    _FAILURES,
                    0,
                    "not-written-persisted",
                    hex_digest[:16],
                    "an append answered 'not written' is in the log",
                )

    def _batches(self, *parts: Iterable[Sequence[str]]) -> None:
        """``batch-split``: one per batch whose messages in the log are not consecutive
        entries in the batch's order (a payload persisted twice is ``ack-duplicated``'s
        matter, not this rule's)."""
        store = self._store
        for part in parts:
            for batch in part:
                landed: list[tuple[int, bytes]] = []
                for d in batch:
                    row = store.one(
                        "SELECT pos, id FROM copies WHERE digest = ? AND n = 1", (_key(d),)
                    )
                    if row is not None:
                        landed.append((int(row[0]), row[1]))
                for (before, _), (at, message_id) in pairwise(landed):
                    if at != before + 1:
                        self._emit(
                            _BATCHES,
                            0,
                            "batch-split",
                            _readable(message_id, self._decode_id),
                            f"a batch's next message is entry {at - before:+d} from the one "
                            "before it, not the entry right after it",
                        )
                        break

    def _collect(self) -> None:
        """This run's violations: the first :data:`KEEP` in the report's order, the
        count of each rule, and how many touch an acknowledged message."""
        store, report, run = self._store, self.report, self._run
        report.violations = [
            Violation(rule, text, detail)
            for rule, text, detail in store.rows(
                "SELECT rule, text, detail FROM viol WHERE run = ? ORDER BY phase, pos, n LIMIT ?",
                (run, self._keep),
            )
        ]
        report.violation_counts = {
            rule: int(count)
            for rule, count in store.rows(
                "SELECT rule, COUNT(*) FROM viol WHERE run = ? GROUP BY rule "
                "ORDER BY MIN(phase * 1000000000000 + pos), MIN(n)",
                (run,),
            )
        }
        row = store.one(
            f"""SELECT COUNT(*) FROM viol v WHERE v.run = ? AND (v.phase IN ({_SHARED}, {_ACKS})
                OR (v.phase NOT IN ({_FAILURES}, {_BATCHES}) AND EXISTS
                    (SELECT 1 FROM ack a WHERE a.text = v.text AND NOT a.truncated)))""",
            (run,),
        )
        report.acked_violations = int(row[0]) if row else 0


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
    work_dir: Path | None = None,
) -> HistoryReport:
    """Check ``entries`` (the whole log, in order, chunked messages rebuilt),
    ``acks``, ``failures``, ``batches``, ``txns`` and ``deliveries`` against it; see
    the module. ``truncated_before``: the channel's truncation point, if it was
    truncated. ``delivered``: the message ids a reader of the whole channel delivered
    (transaction rules); ``deliveries``: what such a reader was handed, with payload
    digests (``delivered-changed``, ``ack-undelivered``). Entries are fed to a
    :class:`HistoryChecker` as they come: an iterator is never held whole.
    """
    with HistoryChecker(
        message_id_from_bytes, truncated_before=truncated_before, work_dir=work_dir
    ) as checker:
        for raw in entries:
            checker.feed(raw)
        return checker.finish(
            acks=acks,
            failures=failures,
            batches=batches,
            txns=txns,
            deliveries=deliveries,
            delivered=delivered,
        )


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


def _before(message_id: bytes, point: MessageId, message_id_from_bytes: MessageIdDecoder) -> bool:
    try:
        return message_id_from_bytes(message_id) < point
    except DecodeError:
        return False


def _readable(message_id: bytes, message_id_from_bytes: MessageIdDecoder) -> str:
    try:
        return str(message_id_from_bytes(message_id))
    except DecodeError:
        return message_id.hex()
