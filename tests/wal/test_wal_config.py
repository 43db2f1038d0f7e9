"""Configuration is validated at construction, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from streamwal.errors import InvalidInputError
from streamwal.wal import Backoff, WALConfig
from streamwal.wal.interceptors import INTERCEPTOR_ORDER
from streamwal.wal.interceptors.timetick import TimeTickInterceptor


def test_defaults_match_the_milvus_streaming_node() -> None:
    config = WALConfig()
    assert config.first_time_tick_backoff == Backoff(initial=0.02, maximum=5.0)
    assert config.append_backoff.initial == 0.01 and config.append_backoff.maximum == 5.0
    assert config.scanner_backoff == Backoff(initial=0.1, maximum=5.0)
    assert config.time_tick_interval == 0.2
    assert config.buffer_capacity_bytes == 64 * 1024 * 1024
    assert config.buffer_keepalive == 30.0


def test_the_schedule_doubles_up_to_the_cap() -> None:
    delays = Backoff(initial=0.02, maximum=0.1).delays()
    assert [round(next(delays), 3) for _ in range(5)] == [0.02, 0.04, 0.08, 0.1, 0.1]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"initial": 0, "maximum": 1}, "initial"),
        ({"initial": 1, "maximum": 0.5}, "maximum"),
        ({"initial": 1, "maximum": 1, "multiplier": 0.5}, "multiplier"),
        ({"initial": 1, "maximum": 1, "max_attempts": 0}, "max_attempts"),
        ({"initial": float("nan"), "maximum": 1}, "initial"),
    ],
)
def test_invalid_backoffs_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError, match=field):
        Backoff(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"time_tick_interval": 0}, "time_tick_interval"),
        ({"buffer_capacity_bytes": 0}, "buffer_capacity_bytes"),
        ({"buffer_keepalive": -1}, "buffer_keepalive"),
        ({"close_timeout": 0}, "close_timeout"),
        ({"append_backoff": 5}, "append_backoff"),
    ],
)
def test_invalid_configs_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInputError, match=field):
        WALConfig(**kwargs)  # type: ignore[arg-type]


def test_the_persisting_interceptor_is_last() -> None:
    assert INTERCEPTOR_ORDER[-1] is TimeTickInterceptor
