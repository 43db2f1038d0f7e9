"""Message values and the wire format (docs/wire-format.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamwal.adaptors.memory import MemoryMessageId
from streamwal.errors import DecodeError, InvalidInputError
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message import ImmutableMessage, MessageType, MutableMessage, decode, encode
from streamwal.wal.message.message import built_mutable


def _persist(msg: MutableMessage, offset: int = 7) -> tuple[BackendMessage, ImmutableMessage]:
    payload, properties = encode(msg)
    message_id = MemoryMessageId(offset)
    return BackendMessage(message_id, payload, properties), msg.into_immutable(message_id)


def _decode(raw: BackendMessage) -> ImmutableMessage:
    return decode(raw, MemoryMessageId.from_bytes)


def test_the_wal_types_are_its_own_records_only() -> None:
    # log format v2: the WAL's vocabulary is the records it writes; a caller's type is
    # an opaque string (the common names are plain-string constants, not members)
    assert [t for t in MessageType if t.is_system] == [MessageType.TIME_TICK]
    assert [t.wire_name for t in MessageType] == [
        "TimeTick",
        "BeginTxn",
        "CommitTxn",
        "RollbackTxn",
    ]
    assert MessageType.from_wire("CreateCollection") is None
    assert MessageType.CREATE_COLLECTION == "CreateCollection"
    assert MessageType.from_wire("nope") is None
    for kind in ("TimeTick", "BeginTxn", "", "Upsert", "42"):
        raw, expected = _persist(MutableMessage(kind).stamped(5, MemoryMessageId(1), 1))
        decoded = _decode(raw)
        assert decoded.type == kind and not decoded.is_wal_record and decoded == expected


def test_encoding_is_the_documented_one() -> None:
    msg = MutableMessage(
        MessageType.INSERT, b"row", vchannel="v1", properties={"k": "v"}, version=3
    ).stamped(123456789, MemoryMessageId(5), 42)
    payload, properties = encode(msg, log_format=1)  # format v1 (v2: test_log_format_v2)
    assert payload == b"row"
    assert properties == {
        "k": "v",
        "_t": "Insert",
        "_v": "3",
        "_tt": "123456789",
        "_src": "42",
        "_vc": "v1",
        "_lc": "0000000000000005",
    }


def test_round_trip_keeps_every_field() -> None:
    msg = (
        MutableMessage(MessageType.DELETE, b"\x00\xff", vchannel="v9", properties={"a": "b"})
        .with_time_tick(99)
        .with_last_confirmed(MemoryMessageId(3))
        .with_source(0)
    )
    raw, expected = _persist(msg)
    decoded = _decode(raw)
    assert decoded == expected
    assert decoded.last_confirmed == MemoryMessageId(3)
    assert decoded.properties == {"a": "b"}


def test_a_time_tick_without_last_confirmed_confirms_itself() -> None:
    msg = MutableMessage(MessageType.TIME_TICK).stamped(10, None, 1)
    raw, expected = _persist(msg, offset=11)
    assert "_lc" not in raw.properties
    assert "_vc" not in raw.properties
    decoded = _decode(raw)
    assert decoded.last_confirmed == MemoryMessageId(11) == expected.last_confirmed
    assert decoded.vchannel == ""


@given(
    msg_type=st.text(max_size=12) | st.sampled_from([t for t in MessageType if t.is_txn_marker]),
    payload=st.binary(max_size=64),
    vchannel=st.text(max_size=8),
    properties=st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=4),
    version=st.integers(min_value=1, max_value=2**32),
    time_tick=st.integers(min_value=0, max_value=2**64 - 1),
    source=st.integers(min_value=0, max_value=2**63),
    last_confirmed=st.integers(min_value=0, max_value=2**64 - 1),
)
def test_round_trip_property(
    msg_type: MessageType | str,
    payload: bytes,
    vchannel: str,
    properties: dict[str, str],
    version: int,
    time_tick: int,
    source: int,
    last_confirmed: int,
) -> None:
    msg = MutableMessage(
        msg_type, payload, vchannel=vchannel, properties=properties, version=version
    ).stamped(time_tick, MemoryMessageId(last_confirmed), source)
    raw, expected = _persist(msg)
    assert _decode(raw) == expected


@pytest.mark.parametrize("key", ["_x", "_t", "", "_"])
def test_user_properties_are_verbatim_in_v2_and_v1_refuses_its_reserved_keys(key: str) -> None:
    # format v2 carries any key (Milvus's "_" keys); v1 keeps its own fields in "_" keys
    msg = MutableMessage(MessageType.USER, properties={key: ""}).stamped(1, MemoryMessageId(0), 1)
    raw, _ = _persist(msg)
    assert _decode(raw).properties == {key: ""}
    with pytest.raises(InvalidInputError, match="format v1"):
        encode(msg, log_format=1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"payload": "text"},
        {"version": 0},
        {"vchannel": 3},
        {"time_tick": -1},
        {"time_tick": 2**64},
        {"source": -1},
        {"properties": {"k": 1}},
    ],
)
def test_invalid_fields_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        MutableMessage(MessageType.USER, **kwargs)  # type: ignore[arg-type]


def test_encoding_needs_the_stamps() -> None:
    with pytest.raises(InvalidInputError):
        encode(MutableMessage(MessageType.USER))
    with pytest.raises(InvalidInputError):  # only a time tick may omit last confirmed
        encode(MutableMessage(MessageType.USER).stamped(1, None, 1))


def _valid_properties() -> dict[str, str]:
    return {"_t": "Insert", "_v": "1", "_tt": "5", "_src": "1", "_lc": "0000000000000001"}


def _with(**changes: str | None) -> dict[str, str]:
    props = _valid_properties()
    for key, value in changes.items():
        wire_key = "_" + key
        if value is None:
            props.pop(wire_key, None)
        else:
            props[wire_key] = value
    return props


@pytest.mark.parametrize(
    "properties",
    [
        {},  # a foreign producer's plain message
        {"key": "value"},
        _with(t=None),
        _with(t="Upsert"),  # unknown type
        _with(v=None),
        _with(v="0"),
        _with(v="one"),
        _with(tt=None),
        _with(tt="-5"),
        _with(tt="05"),
        _with(tt=" 5"),
        _with(tt=str(2**64)),
        _with(tt="1" * 30),
        _with(src=None),
        _with(src="x"),
        _with(lc=None),  # only a time tick may omit it
        _with(lc="zz"),
        _with(lc="ABCDEF0000000001"),  # upper case
        _with(lc="000"),  # odd length
        _with(lc="00"),  # wrong id length for the backend
        _with(lc=""),
    ],
)
def test_foreign_or_corrupt_entries_raise_decode_error(properties: dict[str, str]) -> None:
    raw = BackendMessage(MemoryMessageId(1), b"payload", properties)
    with pytest.raises(DecodeError):
        _decode(raw)


def test_a_misbehaving_id_decoder_is_still_a_decode_error() -> None:
    def broken(data: bytes) -> MemoryMessageId:
        raise struct_error

    struct_error = ValueError("boom")
    raw = BackendMessage(MemoryMessageId(1), b"", _valid_properties())
    with pytest.raises(DecodeError):
        decode(raw, broken)


def test_unknown_reserved_keys_are_ignored() -> None:
    raw = BackendMessage(MemoryMessageId(1), b"", {**_valid_properties(), "_future": "x"})
    assert _decode(raw).properties == {}


def test_estimated_size_counts_payload_and_properties() -> None:
    small = MutableMessage(MessageType.USER, b"x").stamped(1, MemoryMessageId(0), 1)
    big = MutableMessage(MessageType.USER, b"x" * 1000, properties={"k": "v" * 100}).stamped(
        1, MemoryMessageId(0), 1
    )
    a = small.into_immutable(MemoryMessageId(1)).estimated_size
    b = big.into_immutable(MemoryMessageId(1)).estimated_size
    assert b - a == 999 + 101


@pytest.mark.parametrize("vchannel", ["", "v1"])
@pytest.mark.parametrize("properties", [{}, {"k": "v"}])
def test_persisted_as_sets_every_field_like_the_constructor(
    vchannel: str, properties: dict[str, str]
) -> None:
    """``persisted_as`` fills the slots directly; it must agree with ``__init__``."""
    msg = MutableMessage(
        MessageType.INSERT, b"p", vchannel=vchannel, properties=properties, version=3
    )
    confirmed, here = MemoryMessageId(4), MemoryMessageId(5)
    built = msg.persisted_as(here, 99, confirmed, 7)
    expected = ImmutableMessage(
        message_id=here,
        type=MessageType.INSERT,
        payload=b"p",
        time_tick=99,
        last_confirmed=confirmed,
        source=7,
        vchannel=vchannel,
        properties=properties,
        version=3,
    )
    assert built == expected
    assert msg.persisted_as(here, 99, None, 7).last_confirmed == here
    assert built.estimated_size == expected.estimated_size


@pytest.mark.parametrize("vchannel", ["", "v1"])
@pytest.mark.parametrize("properties", [{}, {"k": "v"}])
@pytest.mark.parametrize("ids", [(None, None, None), (3, 4, None), (None, None, 9), (3, 4, 9)])
def test_built_mutable_and_stamping_agree_with_the_constructor(
    vchannel: str, properties: dict[str, str], ids: tuple[int | None, ...]
) -> None:
    """``built_mutable``, ``stamped`` and the ``with_*`` copies fill the slots directly;
    each must give what ``__init__`` gives."""
    producer_id, sequence, txn_id = ids
    fields = {
        "vchannel": vchannel,
        "properties": properties,
        "producer_id": producer_id,
        "sequence": sequence,
        "txn_id": txn_id,
    }
    built = built_mutable(MessageType.INSERT, b"p", **fields)  # type: ignore[arg-type]
    assert built == MutableMessage(MessageType.INSERT, b"p", **fields)  # type: ignore[arg-type]
    confirmed = MemoryMessageId(4)
    stamped = built.stamped(99, confirmed, 7)
    assert stamped == MutableMessage(
        MessageType.INSERT,
        b"p",
        time_tick=99,
        last_confirmed=confirmed,
        source=7,
        **fields,  # type: ignore[arg-type]
    )
    assert built.with_time_tick(5).time_tick == 5 and built.with_time_tick(5).payload == b"p"
    if txn_id is None:
        assert built.with_txn(11) == MutableMessage(
            MessageType.INSERT,
            b"p",
            **{**fields, "txn_id": 11},  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(
    "kwargs",
    [{"properties": {"k": 1}}, {"producer_id": 1}, {"sequence": 2}],
)
def test_built_mutable_refuses_what_the_constructor_refuses(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        MutableMessage(MessageType.INSERT, b"p", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        built_mutable(MessageType.INSERT, b"p", **kwargs)  # type: ignore[arg-type]
