from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from streamwal.errors import ConfigError, InvalidInputError
from streamwal.tso.config import EtcdConfig, OracleSettings, TsoConfig, key_prefix_path


def test_defaults_follow_pd_and_milvus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMWAL_ETCD_ENDPOINTS", raising=False)  # the suite's: the stack's
    config = TsoConfig()
    assert config.etcd.endpoints == ("127.0.0.1:2379",)
    assert config.lease_ttl_s == 3
    assert config.save_window_s == 3.0
    assert config.save_window_ms == 3000
    assert config.update_interval_s == 0.05
    assert config.batch_size == 1000
    assert config.leader_key == "/streamwal/tso/leader"
    assert config.timestamp_key == "/streamwal/tso/timestamp"


def test_prefix_and_endpoints_are_normalised() -> None:
    etcd = EtcdConfig("http://10.0.0.1:2379")  # type: ignore[arg-type]
    config = TsoConfig(etcd=etcd, key_prefix="cluster-a/")
    assert config.etcd.endpoints == ("http://10.0.0.1:2379",)
    assert config.endpoints == (("10.0.0.1", 2379),)
    assert config.leader_key == "/cluster-a/tso/leader"


@pytest.mark.parametrize(
    ("field", "value"),
    [
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


@pytest.mark.parametrize(
    ("field", "value", "key"),
    [
        ("endpoints", (), "endpoints"),
        ("endpoints", ("nohost",), "endpoints[0]"),
        ("endpoints", ("h:1", "h:99999"), "endpoints[1]"),
        ("user", "root", "user"),
        ("password", "pw", "user"),
    ],
)
def test_invalid_etcd_values_name_the_field(field: str, value: Any, key: str) -> None:
    with pytest.raises(ConfigError, match=field) as err:
        TsoConfig(etcd=EtcdConfig(**{field: value}))
    assert err.value.key == key


def test_config_is_frozen() -> None:
    config = TsoConfig()
    with pytest.raises(AttributeError):
        config.batch_size = 5  # type: ignore[misc]


# ---- one declaration of the oracle's settings, one key-prefix rule ----------------------


def test_the_oracle_settings_are_declared_once() -> None:
    """TsoConfig and the node's ``tso:`` section take the oracle's fields from one class."""
    from streamwal.node.config import TSOSettings
    from streamwal.tso.config import OracleSettings

    oracle = {f.name for f in dataclasses.fields(OracleSettings)}
    assert oracle == {
        "key_prefix", "lease_ttl_s", "save_window_s", "update_interval_s", "batch_size"
    }  # fmt: skip
    assert issubclass(TsoConfig, OracleSettings)
    assert issubclass(TSOSettings, OracleSettings)
    for cls in (TsoConfig, TSOSettings):
        own = set(inspect.get_annotations(cls))
        assert not own & oracle, f"{cls.__name__} declares {own & oracle} again"
    # the node's section adds only what a node decides; etcd comes from etcd:
    node_only = {f.name for f in dataclasses.fields(TSOSettings)} - oracle
    assert node_only == {"mode", "remote_addresses", "tls"}


def test_the_node_section_and_tsoconfig_share_their_defaults() -> None:
    from streamwal.node.config import TSOSettings, tso_config
    from streamwal.tso.config import OracleSettings

    built = tso_config(EtcdConfig(), TSOSettings())
    for f in dataclasses.fields(OracleSettings):
        assert getattr(built, f.name) == getattr(TsoConfig(), f.name), f.name


@pytest.mark.parametrize(
    ("prefix", "normalised"),
    [("/streamwal", "/streamwal"), ("cluster-a/", "/cluster-a"), ("/a/b/", "/a/b")],
)
def test_a_library_key_prefix_is_normalised(prefix: str, normalised: str) -> None:
    assert key_prefix_path(prefix) == normalised
    assert TsoConfig(key_prefix=prefix).key_prefix == normalised


@pytest.mark.parametrize("prefix", ["", "/", "//", "a b", "/a\tb", None, 5])
def test_a_key_prefix_needs_a_path(prefix: Any) -> None:
    with pytest.raises(ConfigError, match="key_prefix") as err:
        key_prefix_path(prefix)
    assert err.value.key == "key_prefix"
    with pytest.raises(ConfigError):
        key_prefix_path(prefix, exact=True)


@pytest.mark.parametrize("prefix", ["streamwal", "/prod/", "prod/"])
def test_an_exact_key_prefix_is_taken_as_written(prefix: str) -> None:
    key_prefix_path(prefix)  # a library caller's is normalised
    with pytest.raises(ConfigError, match="no trailing /") as err:
        key_prefix_path(prefix, exact=True)
    assert err.value.key == "key_prefix"
    assert key_prefix_path("/prod-a/cluster-1", exact=True) == "/prod-a/cluster-1"


def test_the_oracle_settings_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        OracleSettings("/x")  # type: ignore[misc]
    assert TsoConfig(EtcdConfig(("h:1",))).etcd.endpoints == ("h:1",)  # the first positional
