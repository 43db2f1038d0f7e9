"""The checker's fast decode paths agree with the full decoder on every field the
rules read, and on which entries are foreign: for the wire format's plain entries,
v1's and v2's packs (which they must take, or they are no faster), and for entries
bent every way a foreign writer or a damaged log could bend them (which they must
hand to the full decoder)."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.errors import DecodeError, UnsupportedLogFormatError
from streamwal.verify import history
from streamwal.verify.history import Facts, decode_entry, entry_facts
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message import MessageType, MutableMessage, encode
from streamwal.wal.message.frame import PACK_HEADER, encode_pack

DECODE_ID = PulsarMessageId.from_bytes
ID = PulsarMessageId(7, 3)
CONFIRMED = PulsarMessageId(7, 1)


def full(raw: BackendMessage) -> list[Facts]:
    """The facts as the full decoder gives them: :func:`decode_entry`'s messages, each
    through the slow path's own mapping (the fast paths are what is under test)."""
    try:
        msgs = decode_entry(raw, DECODE_ID)
    except DecodeError:
        return [(raw.message_id.to_bytes(), None, 0, b"", b"", 0, None, None, None, None, 0)]
    return [history._facts_of(msg) for msg in msgs]


def entry(
    kind: MessageType | str = MessageType.INSERT,
    payload: bytes = b"payload",
    confirms: PulsarMessageId | None = CONFIRMED,
    **fields: Any,
) -> BackendMessage:
    msg = MutableMessage(kind, payload, **fields).stamped(1000, confirms, 2)
    body, props = encode(msg, log_format=1)  # the fast path is format v1's
    return BackendMessage(ID, body, props)


PLAIN = [
    entry(MessageType.TIME_TICK, b"", None),  # an owner's first time tick
    entry(MessageType.TIME_TICK, b""),
    entry(),
    entry(vchannel="by-dml_0"),
    entry(properties={"k": "v", "other": ""}),
    entry(producer_id=5, sequence=9),
    entry(MessageType.BEGIN_TXN, b""),
    entry(txn_id=1000),
    entry(MessageType.COMMIT_TXN, b"3", txn_id=1000),
    entry(MessageType.COMMIT_TXN, b"x", txn_id=1000),
    entry(MessageType.ROLLBACK_TXN, b"", txn_id=1000),
    entry(MessageType.DELETE, b"\x00" * 300, vchannel="v", properties={"a": "b"}),
]


def test_the_fast_path_takes_every_plain_entry_and_agrees_with_the_decoder() -> None:
    for raw in PLAIN:
        fast = history._plain_facts(
            raw.message_id.to_bytes(), raw.payload, raw.properties, DECODE_ID
        )
        assert fast is not None, raw.properties  # taken: no fallback for these
        assert [fast] == full(raw), raw.properties
        assert entry_facts(raw, DECODE_ID) == [fast]


#: property values that are close to valid, and some that are of the wrong type
ODD_VALUES = [
    "",
    "0",
    "00",
    "01",
    "1",
    "+1",
    "-1",
    " 1",
    "1 ",
    "1_0",
    "\u0661",  # an Arabic-Indic digit: isdigit, not ASCII
    "\u00b2",  # a superscript two: isdigit, not a decimal
    str(2**64 - 1),
    str(2**64),
    "9" * 21,
    "TimeTick",
    "Insert",
    "CommitTxn",
    "Nope",
    "0000000000000007000000000000000100000000",
    "0000000000000007000000000000000100000000".upper(),
    "00000000000000070000000000000001ffffffff",
    "00 00",
    "abc",
    None,
    1,
    b"1",
]
KEYS = ["_t", "_v", "_tt", "_src", "_vc", "_lc", "_pid", "_seq", "_tx", "user", "_x", 5]


def bent(base: BackendMessage, changes: list[tuple[Any, Any]]) -> BackendMessage:
    """``base`` with each (key, value) of ``changes`` set, or the key dropped where the
    value is ``"<drop>"``."""
    props: dict[Any, Any] = dict(base.properties)
    for key, value in changes:
        if value == "<drop>":
            props.pop(key, None)
        else:
            props[key] = value
    return BackendMessage(base.message_id, base.payload, props)


def test_each_single_change_to_a_plain_entry_decodes_the_same_both_ways() -> None:
    for base in PLAIN:
        for key in KEYS:
            for value in [*ODD_VALUES, "<drop>"]:
                raw = bent(base, [(key, value)])
                assert entry_facts(raw, DECODE_ID) == full(raw), raw.properties


@settings(max_examples=600, deadline=None)
@given(
    base=st.sampled_from(PLAIN),
    changes=st.lists(
        st.tuples(st.sampled_from(KEYS), st.sampled_from([*ODD_VALUES, "<drop>"])),
        min_size=1,
        max_size=3,
    ),
)
def test_a_bent_entry_decodes_the_same_both_ways(
    base: BackendMessage, changes: list[tuple[Any, Any]]
) -> None:
    raw = bent(base, changes)
    assert entry_facts(raw, DECODE_ID) == full(raw), raw.properties


def test_what_is_not_a_dict_of_strings_or_bytes_goes_to_the_decoder() -> None:
    raw = PLAIN[2]
    for odd in (
        BackendMessage(ID, bytearray(raw.payload), raw.properties),  # type: ignore[arg-type]
        BackendMessage(ID, raw.payload, {**raw.properties, "extra": b"bytes"}),  # type: ignore[dict-item]
        BackendMessage(ID, b"not ours", {}),
    ):
        assert entry_facts(odd, DECODE_ID) == full(odd)
    assert entry_facts(BackendMessage(ID, b"not ours", {}), DECODE_ID)[0][1] is None


def test_a_v2_pack_gives_the_facts_of_each_of_its_messages() -> None:
    stamped = [
        (MutableMessage("TimeTick", b"a", properties={"_t": "1"}).with_producer(5, 9), 1000),
        (MutableMessage(MessageType.BEGIN_TXN, b""), 1001),
        (MutableMessage(MessageType.COMMIT_TXN, b"0").with_txn(1001), 1002),
    ]
    raw = BackendMessage(ID, encode_pack(stamped, CONFIRMED, 2, 4), {"swf": "2"})
    facts = entry_facts(raw, DECODE_ID)
    assert facts == full(raw)
    assert [(f[0], f[1]) for f in facts] == [
        (PulsarMessageId(7, 3, 0).to_bytes(), ""),  # a caller's "TimeTick" is a caller's
        (PulsarMessageId(7, 3, 1).to_bytes(), "BeginTxn"),
        (PulsarMessageId(7, 3, 2).to_bytes(), "CommitTxn"),
    ]


# ---- log format v2 --------------------------------------------------------------


def pack(
    *msgs: tuple[MutableMessage, int],
    confirms: PulsarMessageId | None = CONFIRMED,
    term: int = 4,
    at: PulsarMessageId = ID,
) -> BackendMessage:
    return BackendMessage(at, encode_pack(msgs, confirms, 2, term), {"swf": "2"})


def one(kind: MessageType | str = "Insert", payload: bytes = b"payload", **fields: Any) -> Any:
    return MutableMessage(kind, payload, **fields)


TXN = 1001
PACKS = [
    pack((one(MessageType.TIME_TICK, b""), 1000), confirms=None),  # an owner's first
    pack((one(MessageType.TIME_TICK, b""), 1000), (one(), 1001), (one(), 1002), confirms=None),
    pack((one(MessageType.TIME_TICK, b""), 1000)),
    pack((one(), 1000)),
    pack((one(), 1000), (one(payload=b""), 1001), (one(payload=b"\x00" * 300), 1002)),
    pack((one(vchannel="by-dml_0", properties={"k": "v", "other": ""}), 1000)),
    pack((one(properties={"_t": "1", "": "", "_x": "\u00e9"}), 1000)),  # `_` keys, empty key
    pack((one(""), 1000), (one("TimeTick"), 1001), (one("\u00e9t\u00e9"), 1002)),  # caller types
    pack((one().with_producer(5, 9), 1000)),
    pack((one().with_producer(5, 9), 1000), (one().with_producer(5, 10), 1001), (one(), 1002)),
    pack((one(MessageType.BEGIN_TXN, b""), TXN)),
    pack((one().with_txn(TXN), 1002)),
    pack((one(MessageType.COMMIT_TXN, b"3").with_txn(TXN), 1003)),
    pack((one(MessageType.COMMIT_TXN, b"x").with_txn(TXN), 1003)),
    pack(
        (one(MessageType.BEGIN_TXN, b""), TXN),
        (one("", b"m").with_txn(TXN), 1002),
        (one(MessageType.COMMIT_TXN, b"1").with_txn(TXN), 1003),
    ),
    pack((one(MessageType.ROLLBACK_TXN, b"").with_txn(TXN), 1003)),
    pack((one(), 2**64 - 1), term=0),
    pack((one(), 1000), term=2**64 - 1),
]


def role(raw: BackendMessage, value: int) -> bytes:
    """``raw``'s frame with its first message's transaction role set to ``value``."""
    data = bytearray(raw.payload)
    data[PACK_HEADER.size + len(CONFIRMED.to_bytes()) + 1] = value
    return bytes(data)


def outcome(decode: Any, raw: BackendMessage) -> object:
    """What ``decode`` gives for ``raw``, or the type of error it raises."""
    try:
        return decode(raw)
    except Exception as exc:
        return type(exc)


def fast(raw: BackendMessage) -> list[Facts]:
    return entry_facts(raw, DECODE_ID)


def test_the_fast_path_takes_every_v2_pack_and_agrees_with_the_decoder() -> None:
    for raw in [*PACKS, BackendMessage(ID, PACKS[4].payload, {"swf": "2", "other": "x"})]:
        taken = history._pack_facts(
            raw.message_id.to_bytes(), raw.payload, raw.properties, DECODE_ID
        )
        assert taken is not None, raw.payload  # taken: no fallback for these
        assert taken == full(raw), raw.payload
        assert entry_facts(raw, DECODE_ID) == taken


def test_a_v2_pack_has_its_ids_term_and_confirmations() -> None:
    first, *rest = fast(PACKS[1])
    assert [f[0] for f in (first, *rest)] == [ID.in_pack(i).to_bytes() for i in range(3)]
    assert first[1] == "TimeTick" and first[4] == first[0]  # confirms itself
    assert [f[4] for f in rest] == [first[0]] * 2  # the rest confirm the owner's first
    assert {f[10] for f in (first, *rest)} == {4}
    (single,) = fast(PACKS[3])
    assert single[0] == ID.to_bytes() and single[4] == CONFIRMED.to_bytes()
    assert single[3] == hashlib.sha256(b"payload").digest()
    assert fast(PACKS[-1])[0][10] == 2**64 - 1
    assert fast(PLAIN[2])[0][10] == 0  # v1 has no term
    assert [f[9] for f in fast(PACKS[14])] == [None, None, 1]  # a commit's member count


def test_unusual_v2_entries_go_to_the_decoder_and_decode_the_same() -> None:
    base = PACKS[4]
    cases: list[BackendMessage | bytes] = [
        BackendMessage(ID, base.payload, {"swf": "3"}),  # a newer format: not skipped
        BackendMessage(ID, base.payload[:-1], {"swf": "2"}),  # cut short
        BackendMessage(ID, base.payload + b"\x00", {"swf": "2"}),  # bytes after it
        BackendMessage(ID, b"SWF\x03" + base.payload[4:], {"swf": "2"}),  # a newer frame
        BackendMessage(ID, b"SWF\x02\x02" + base.payload[5:], {"swf": "2"}),  # a chunk's kind
        BackendMessage(ID, b"", {"swf": "2"}),
        BackendMessage(ID, b"not ours", {"swf": "2"}),
        BackendMessage(PulsarMessageId(7, 3, 0), base.payload, {"swf": "2"}),  # a Pulsar batch
        BackendMessage(ID, bytearray(base.payload), {"swf": "2"}),  # type: ignore[arg-type]
        # not UTF-8: a caller's type, a vchannel, a property's key and value
        pack((one("\u00e9"), 1000)).payload.replace("\u00e9".encode(), b"\xff\xfe"),
        pack((one(vchannel="\u00e9"), 1000)).payload.replace("\u00e9".encode(), b"\xff\xfe"),
        pack((one(properties={"\u00e9": "v"}), 1000)).payload.replace(
            "\u00e9".encode(), b"\xff\xfe"
        ),
        pack((one(properties={"k": "\u00e9"}), 1000)).payload.replace(
            "\u00e9".encode(), b"\xff\xfe"
        ),
        # a WAL record this reader does not know: not skipped
        pack((one(MessageType.TIME_TICK, b""), 1000)).payload.replace(b"TimeTick", b"TimeTock"),
        # a caller's message that claims to be a transaction's, and a commit that does not
        role(pack((one(), 1000)), 2),
        role(pack((one(MessageType.COMMIT_TXN, b"1").with_txn(TXN), 1003)), 0),
        role(pack((one().with_txn(TXN), 1003)), 0),
        # the owner's first time tick is a pack's first message, and the WAL's record:
        # nothing else confirms itself
        pack((one(), 1000), confirms=None).payload,
        pack((one("TimeTick", b""), 1000), confirms=None).payload,
        pack((one(), 1000), (one(MessageType.TIME_TICK, b""), 1001), confirms=None).payload,
    ]
    odd = [BackendMessage(ID, b, {"swf": "2"}) if isinstance(b, bytes) else b for b in cases]
    for raw in odd:
        assert outcome(fast, raw) == outcome(full, raw), raw.payload
        taken = outcome(
            lambda r: history._pack_facts(
                r.message_id.to_bytes(), r.payload, r.properties, DECODE_ID
            ),
            raw,
        )
        assert not isinstance(taken, list), raw.payload  # left to the full decoder
    assert outcome(fast, odd[0]) is UnsupportedLogFormatError
    assert outcome(fast, odd[3]) is UnsupportedLogFormatError
    assert outcome(fast, odd[13]) is UnsupportedLogFormatError
    assert [fast(raw)[0][1] for raw in (*odd[1:3], *odd[4:13], *odd[14:])] == [None] * (
        len(odd) - 3
    )


@settings(max_examples=800, deadline=None)
@given(
    base=st.sampled_from(PACKS),
    changes=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**6), st.integers(0, 255)),
        min_size=1,
        max_size=3,
    ),
)
def test_a_bent_v2_frame_decodes_the_same_both_ways(
    base: BackendMessage, changes: list[tuple[int, int]]
) -> None:
    data = bytearray(base.payload)
    for at, value in changes:
        data[at % len(data)] = value
    raw = BackendMessage(ID, bytes(data), base.properties)
    assert outcome(fast, raw) == outcome(full, raw), bytes(data)


@settings(max_examples=200, deadline=None)
@given(base=st.sampled_from(PACKS), cut=st.integers(min_value=0, max_value=10**6))
def test_a_cut_v2_frame_decodes_the_same_both_ways(base: BackendMessage, cut: int) -> None:
    raw = BackendMessage(ID, base.payload[: cut % len(base.payload)], base.properties)
    assert outcome(fast, raw) == outcome(full, raw)
