"""Property tests of the wire format against hostile input (hypothesis).

Round trips with Pulsar message ids of any value in both log formats, and arbitrary
entries (any payload, any properties, format v1's reserved keys with any value, values
of the wrong type; format v2 frames cut or flipped anywhere) that must either decode
to a message that encodes back to the same entry or raise
:class:`~streamwal.errors.DecodeError`, and nothing else.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.errors import DecodeError, UnsupportedLogFormatError
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message import MessageType, MutableMessage, decode, encode
from streamwal.wal.message.codec import FORMAT_PROPERTY
from streamwal.wal.message.codec_v1 import (
    KEY_LAST_CONFIRMED,
    KEY_SOURCE,
    KEY_TIME_TICK,
    KEY_TYPE,
    KEY_VCHANNEL,
    KEY_VERSION,
    V1_CALLER_TYPES,
)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
PULSAR_IDS = st.builds(PulsarMessageId, INT64, INT64, INT32)
V1_TYPES: list[MessageType | str] = [*MessageType, *V1_CALLER_TYPES]
RESERVED = [KEY_TYPE, KEY_VERSION, KEY_TIME_TICK, KEY_LAST_CONFIRMED, KEY_VCHANNEL, KEY_SOURCE]
USER_KEYS = st.text(min_size=1, max_size=8).filter(lambda k: not k.startswith("_"))
ANY_TEXT = st.text(max_size=40)
WIRE_VALUES = st.one_of(
    ANY_TEXT,
    st.sampled_from(["0", "1", "01", "-1", str(2**64), str(2**64 - 1), "TimeTick", "Insert"]),
    st.text(alphabet="0123456789abcdef", max_size=48),
)
WRONG_TYPES: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.integers(), st.binary(max_size=8), st.lists(st.integers(), max_size=2)
)


def _decode(raw: BackendMessage) -> Any:
    return decode(raw, PulsarMessageId.from_bytes)


@given(
    msg_type=st.sampled_from(V1_TYPES),
    payload=st.binary(max_size=256),
    vchannel=st.text(max_size=16),
    properties=st.dictionaries(USER_KEYS, ANY_TEXT, max_size=6),
    time_tick=st.integers(min_value=0, max_value=2**64 - 1),
    source=st.integers(min_value=0, max_value=2**63),
    at=PULSAR_IDS,
    confirms=st.one_of(st.none(), PULSAR_IDS),
    log_format=st.sampled_from([1, 2]),
)
def test_any_stamped_message_round_trips_with_pulsar_ids(
    msg_type: MessageType | str,
    payload: bytes,
    vchannel: str,
    properties: dict[str, str],
    time_tick: int,
    source: int,
    at: PulsarMessageId,
    confirms: PulsarMessageId | None,
    log_format: int,
) -> None:
    if confirms is None and msg_type is not MessageType.TIME_TICK:
        confirms = at
    msg = MutableMessage(msg_type, payload, vchannel=vchannel, properties=properties)
    stamped = msg.stamped(time_tick, confirms, source)
    body, props = encode(stamped, log_format=log_format)
    decoded = _decode(BackendMessage(at, body, props))
    assert decoded == stamped.into_immutable(at)
    assert decoded.last_confirmed == (at if confirms is None else confirms)
    assert encode(
        MutableMessage(
            decoded.type,
            decoded.payload,
            vchannel=decoded.vchannel,
            properties=decoded.properties,
            version=decoded.version,
        ).stamped(decoded.time_tick, confirms, decoded.source),
        log_format=log_format,
    ) == (body, props)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    payload=st.one_of(st.binary(max_size=64), WRONG_TYPES, ANY_TEXT),
    properties=st.dictionaries(
        st.one_of(st.sampled_from(RESERVED), USER_KEYS, st.text(max_size=4)),
        st.one_of(WIRE_VALUES, WRONG_TYPES),
        max_size=10,
    ),
    at=PULSAR_IDS,
)
def test_arbitrary_entries_decode_or_raise_decode_error_only(
    payload: Any, properties: dict[Any, Any], at: PulsarMessageId
) -> None:
    raw = BackendMessage(at, payload, properties)
    try:
        msg = _decode(raw)
    except DecodeError:
        return
    except UnsupportedLogFormatError:  # a format property of a version this reader lacks
        assert properties.get(FORMAT_PROPERTY) not in (None, "2")
        return
    # what decodes is a well-formed message: it encodes back to the same wire fields
    body, props = encode(
        MutableMessage(
            msg.type, msg.payload, vchannel=msg.vchannel, properties=msg.properties,
            version=msg.version,
        ).stamped(
            msg.time_tick, None if KEY_LAST_CONFIRMED not in properties else msg.last_confirmed,
            msg.source,
        ),
        log_format=1,
    )  # fmt: skip
    assert body == payload
    expected = {k: v for k, v in properties.items() if k in RESERVED or not k.startswith("_")}
    if expected.get(KEY_VCHANNEL) == "":
        del expected[KEY_VCHANNEL]
    assert props == expected


@given(
    base_type=st.sampled_from([t for t in V1_TYPES if t is not MessageType.TIME_TICK]),
    key=st.sampled_from(RESERVED),
    value=st.one_of(WIRE_VALUES, WRONG_TYPES),
    drop=st.booleans(),
)
def test_one_corrupted_reserved_property_never_crashes_the_decoder(
    base_type: MessageType, key: str, value: Any, drop: bool
) -> None:
    at = PulsarMessageId(3, 4)
    body, props = encode(
        MutableMessage(base_type, b"x").stamped(10, PulsarMessageId(3, 3), 1), log_format=1
    )
    corrupted: dict[str, Any] = dict(props)
    if drop:
        corrupted.pop(key, None)
    else:
        corrupted[key] = value
    try:
        msg = _decode(BackendMessage(at, body, corrupted))
    except DecodeError:
        event("rejected")
        return
    event("still a message")
    assert msg.payload == b"x" and msg.message_id == at
    confirms = msg.last_confirmed if KEY_LAST_CONFIRMED in corrupted else None
    again = MutableMessage(msg.type, msg.payload, vchannel=msg.vchannel, version=msg.version)
    _, props_again = encode(again.stamped(msg.time_tick, confirms, msg.source), log_format=1)
    expected = {k: v for k, v in corrupted.items() if v != "" or k != KEY_VCHANNEL}
    assert props_again == expected


@given(
    kind=st.text(max_size=8),
    properties=st.dictionaries(st.text(max_size=6), ANY_TEXT, max_size=4),
    cut=st.integers(min_value=0, max_value=400),
    flip=st.integers(min_value=0, max_value=400),
    xor=st.integers(min_value=1, max_value=255),
)
def test_a_damaged_v2_frame_decodes_or_raises_decode_error_only(
    kind: str, properties: dict[str, str], cut: int, flip: int, xor: int
) -> None:
    """Format v2: any frame cut short or with one byte changed is a DecodeError, an
    UnsupportedLogFormatError (its version or WAL record byte), or still a message."""
    msg = MutableMessage(kind, b"payload", properties=properties)
    body, props = encode(msg.stamped(10, PulsarMessageId(3, 3), 1))
    damaged = bytearray(body[: max(cut, 0)] if cut < len(body) else body)
    if flip < len(damaged):
        damaged[flip] ^= xor
    try:
        got = _decode(BackendMessage(PulsarMessageId(3, 4), bytes(damaged), props))
    except (DecodeError, UnsupportedLogFormatError):
        event("rejected")
        return
    event("still a message")
    assert got.message_id == PulsarMessageId(3, 4)
