from __future__ import annotations

from typing import Any

import pytest

from streamwal.errors import InvalidInputError
from streamwal.tso.config import TsoConfig


def test_defaults_follow_pd_and_milvus() -> None:
    config = TsoConfig()
    assert config.etcd_endpoints == ("127.0.0.1:12379",)
    assert config.lease_ttl_s == 3
    assert config.save_window_s == 3.0
    assert config.save_window_ms == 3000
    assert config.update_interval_s == 0.05
    assert config.batch_size == 1000
    assert config.leader_key == "/streamwal/tso/leader"
    assert config.timestamp_key == "/streamwal/tso/timestamp"


def test_prefix_and_endpoints_are_normalised() -> None:
    config = TsoConfig(etcd_endpoints="http://10.0.0.1:2379", key_prefix="cluster-a/")  # type: ignore[arg-type]
    assert config.etcd_endpoints == ("http://10.0.0.1:2379",)
    assert config.endpoints == (("10.0.0.1", 2379),)
    assert config.leader_key == "/cluster-a/tso/leader"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("etcd_endpoints", ()),
        ("etcd_endpoints", ("nohost",)),
        ("etcd_endpoints", ("h:99999",)),
        ("key_prefix", ""),
        ("key_prefix", "/"),
        ("key_prefix", "a b"),
        ("lease_ttl_s", 0),
        ("lease_ttl_s", 1.5),
        ("save_window_s", 0),
        ("save_window_s", 0.01),  # not above the update interval
        ("update_interval_s", -1),
        ("update_interval_s", float("nan")),
        ("batch_size", 0),
        ("batch_size", 1 << 18),
        ("unavailable_after_s", 0),
        ("etcd_timeout_s", 0),
    ],
)
def test_invalid_values_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidInputError, match=field):
        TsoConfig(**{field: value})


def test_config_is_frozen() -> None:
    config = TsoConfig()
    with pytest.raises(AttributeError):
        config.batch_size = 5  # type: ignore[misc]
