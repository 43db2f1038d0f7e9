"""The checker's fast decode path agrees with the full decoder on every field the
rules read, and on which entries are foreign: for the wire format's plain entries
(which it must take, or it is no faster) and for entries bent every way a foreign
writer or a damaged log could bend them (which it must hand to the full decoder)."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.errors import DecodeError
from streamwal.verify import history
from streamwal.verify.history import Facts, decode_entry, entry_facts
from streamwal.wal.backend import BackendMessage
from streamwal.wal.interceptors.txn.session import parse_decimal_payload
from streamwal.wal.message import MessageType, MutableMessage, encode
from streamwal.wal.message.frame import encode_pack

DECODE_ID = PulsarMessageId.from_bytes
ID = PulsarMessageId(7, 3)
CONFIRMED = PulsarMessageId(7, 1)


def full(raw: BackendMessage) -> list[Facts]:
    """The facts as the full decoder gives them: each ImmutableMessage's fields (a
    caller's type is ``""``: the rules need not know it)."""
    try:
        msgs = decode_entry(raw, DECODE_ID)
    except DecodeError:
        return [(raw.message_id.to_bytes(), None, 0, b"", b"", 0, None, None, None, None, 0)]
    return [
        (
            msg.message_id.to_bytes(),
            msg.type.wire_name if isinstance(msg.type, MessageType) else "",
            msg.time_tick,
            hashlib.sha256(msg.payload).digest(),
            msg.last_confirmed.to_bytes(),
            msg.source,
            msg.producer_id,
            msg.sequence,
            msg.txn_id,
            parse_decimal_payload(msg.payload) if msg.type is MessageType.COMMIT_TXN else None,
            msg.term,
        )
        for msg in msgs
    ]


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
