from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamwal.errors import InvalidInputError
from streamwal.tso.timestamp import (
    LOGICAL_BITS,
    MAX_LOGICAL,
    HybridTimestamp,
    compose,
    format_timestamp,
    parse_timestamp,
    physical_datetime,
    split,
)

_PHYSICAL = st.integers(min_value=0, max_value=(1 << (64 - LOGICAL_BITS)) - 1)
_LOGICAL = st.integers(min_value=0, max_value=MAX_LOGICAL - 1)


@given(_PHYSICAL, _LOGICAL)
def test_compose_split_round_trip(physical: int, logical: int) -> None:
    ts = compose(physical, logical)
    assert split(ts) == (physical, logical)
    assert ts < 1 << 64


@given(_PHYSICAL, _LOGICAL, _PHYSICAL, _LOGICAL)
def test_integer_order_is_physical_then_logical(p1: int, l1: int, p2: int, l2: int) -> None:
    assert (compose(p1, l1) < compose(p2, l2)) == ((p1, l1) < (p2, l2))


def test_layout_is_physical_shifted_by_18() -> None:
    assert MAX_LOGICAL == 1 << 18
    assert compose(1, 0) == 1 << 18
    assert compose(1, 5) == (1 << 18) + 5


@pytest.mark.parametrize(
    ("physical", "logical"), [(-1, 0), (0, -1), (0, MAX_LOGICAL), (1 << 46, 0)]
)
def test_compose_rejects_out_of_range(physical: int, logical: int) -> None:
    with pytest.raises(InvalidInputError):
        compose(physical, logical)


def test_physical_part_prints_as_utc() -> None:
    moment = datetime(2025, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
    ms = int(moment.timestamp() * 1000)
    ts = compose(ms, 42)
    assert physical_datetime(ts) == moment
    assert format_timestamp(ts) == f"{ts} (2025-03-04T05:06:07.890Z, logical 42)"
    info = HybridTimestamp.of(ts)
    assert info.as_dict() == {
        "timestamp": ts,
        "physical_ms": ms,
        "physical": "2025-03-04T05:06:07.890Z",
        "logical": 42,
    }


def test_parse_accepts_decimal_and_hex() -> None:
    ts = compose(1_700_000_000_000, 7)
    assert parse_timestamp(str(ts)) == ts
    assert parse_timestamp(hex(ts)) == ts
    assert parse_timestamp(f" {ts:_} ") == ts


@pytest.mark.parametrize("text", ["", "abc", "-1", str(1 << 64), "1.5"])
def test_parse_rejects_garbage(text: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_timestamp(text)
