"""Reading broker policies into findings, and acting on them (no broker needed)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from streamwal.adaptors.pulsar import PolicyAction, PulsarConfig
from streamwal.adaptors.pulsar.admin import admin_url_for
from streamwal.adaptors.pulsar.policies import TopicState, enforce, inspect_topic
from streamwal.errors import InvalidInputError, MisconfiguredError, UnsafeBrokerPolicyError

_TOPIC = "persistent://public/wal/ch-1"
_NO_QUOTA = {"limit": -1, "limitSize": -1, "limitTime": -1, "policy": "producer_request_hold"}
_EXISTING = TopicState(exists=True, has_cursor=True, has_entries=True)


class _Admin:
    """Answers the admin GETs an inspection makes, as a stock broker would, with overrides."""

    def __init__(self, **answers: Any) -> None:
        self.answers = {
            "messageTTL": 0,
            "backlogQuotaMap": {"destination_storage": _NO_QUOTA, "message_age": _NO_QUOTA},
            "retention": {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
            "deduplicationEnabled": True,
            **answers,
        }

    async def get(self, path: str) -> Any:
        assert path.startswith("persistent/public/wal/ch-1/") and path.endswith("?applied=true")
        return self.answers[path.split("/")[-1].split("?")[0]]


async def _inspect(state: TopicState = _EXISTING, **answers: Any) -> list[str]:
    found = await inspect_topic(_Admin(**answers), _TOPIC, "streamwal-wal", state)  # type: ignore[arg-type]
    return [f.policy for f in found]


async def test_stock_policies_are_safe() -> None:
    assert await _inspect() == []


async def test_each_unsafe_policy_is_found() -> None:
    assert await _inspect(messageTTL=60) == ["message-ttl"]
    evict = {**_NO_QUOTA, "limitSize": 1024, "policy": "consumer_backlog_eviction"}
    assert await _inspect(backlogQuotaMap={"destination_storage": evict}) == ["backlog-eviction"]
    by_age = {**_NO_QUOTA, "limitTime": 3600, "policy": "consumer_backlog_eviction"}
    assert await _inspect(backlogQuotaMap={"message_age": by_age}) == ["backlog-eviction"]
    assert await _inspect(deduplicationEnabled=False) == ["deduplication"]


async def test_an_eviction_policy_without_a_limit_evicts_nothing() -> None:
    unlimited = {**_NO_QUOTA, "policy": "consumer_backlog_eviction"}
    assert await _inspect(backlogQuotaMap={"destination_storage": unlimited}) == []


async def test_a_missing_cursor_matters_only_for_a_log_without_retention() -> None:
    orphan = TopicState(exists=True, has_cursor=False, has_entries=True)
    assert await _inspect(orphan) == ["cursor-missing"]
    kept = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    assert await _inspect(orphan, retention=kept) == []
    # a topic nobody wrote to yet, or one that does not exist yet: nothing to lose
    assert await _inspect(TopicState(exists=True, has_cursor=False, has_entries=False)) == []
    assert await _inspect(TopicState(exists=False, has_cursor=False, has_entries=False)) == []


async def test_enforce_refuses_warns_or_ignores(caplog: pytest.LogCaptureFixture) -> None:
    findings = await inspect_topic(
        _Admin(messageTTL=60, deduplicationEnabled=False),  # type: ignore[arg-type]
        _TOPIC,
        "streamwal-wal",
        _EXISTING,
    )
    with pytest.raises(UnsafeBrokerPolicyError) as refused:
        enforce("ch-1", findings, unsafe=PolicyAction.REFUSE, no_deduplication=PolicyAction.WARN)
    assert refused.value.policies == ("message-ttl",)
    assert isinstance(refused.value, MisconfiguredError)
    assert "remove-message-ttl public/wal" in str(refused.value)
    assert "pulsar.on_unsafe_policy: warn" in str(refused.value)

    with pytest.raises(UnsafeBrokerPolicyError) as refused:
        enforce("ch-1", findings, unsafe=PolicyAction.IGNORE, no_deduplication=PolicyAction.REFUSE)
    assert refused.value.policies == ("deduplication",)
    assert "pulsar.on_no_deduplication: warn" in str(refused.value)

    caplog.clear()
    caplog.set_level(logging.WARNING, logger="streamwal.adaptors.pulsar.policies")
    enforce("ch-1", findings, unsafe=PolicyAction.WARN, no_deduplication=PolicyAction.IGNORE)
    assert [r.getMessage().rsplit("[", 1)[1] for r in caplog.records] == ["message-ttl]"]


def test_admin_url_is_derived_for_known_ports_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert admin_url_for("pulsar://broker:6650") == "http://broker:8080"
    assert admin_url_for("pulsar+ssl://broker:6651") == "https://broker:8443"
    # the local stack's broker: the admin API the environment names beside it
    monkeypatch.setenv("STREAMWAL_PULSAR_SERVICE_URL", "pulsar://127.0.0.1:16650")
    monkeypatch.setenv("STREAMWAL_PULSAR_ADMIN_URL", "http://127.0.0.1:18080")
    assert admin_url_for("pulsar://127.0.0.1:16650") == "http://127.0.0.1:18080"
    assert admin_url_for("pulsar://a:6650,b:6650") == "http://a:8080"
    assert admin_url_for("pulsar://broker:7777") is None


def test_policy_settings_are_validated() -> None:
    with pytest.raises(InvalidInputError, match="admin_url"):
        PulsarConfig(admin_url="broker:8080")
    with pytest.raises(InvalidInputError, match="cursor_subscription"):
        PulsarConfig(cursor_subscription="")
    with pytest.raises(InvalidInputError, match="on_unsafe_policy"):
        PulsarConfig(on_unsafe_policy="refuse")  # type: ignore[arg-type]
