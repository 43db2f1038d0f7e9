"""Broker policies that would defeat the WAL's durable cursor, found at open.

The cursor (:mod:`.cursor`) keeps every entry in a backlog, so neither retention nor
inactive-topic deletion can take the log. Three policies still can, and a fourth
lets a reconnecting producer write an entry twice:

- a message TTL acknowledges old backlog on the cursor's behalf;
- a backlog quota with ``consumer_backlog_eviction`` moves the cursor forward;
- a cursor found missing on a topic that already holds entries, in a namespace
  without unbounded retention: someone deleted it, and what nobody held may be gone;
- deduplication off for the topic (the namespace is probed separately, :mod:`.deduplication`).

Each is read from the admin API as *applied* to the topic (topic, namespace, then
broker defaults), so an override at any level is seen.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.adaptors.pulsar.config import PolicyAction
from streamwal.errors import UnsafeBrokerPolicyError

__all__ = ["DEDUPLICATION", "PolicyFinding", "enforce", "inspect_topic", "topic_state"]

_log = logging.getLogger(__name__)

DEDUPLICATION = "deduplication"


@dataclass(frozen=True)
class PolicyFinding:
    """One policy that would lose or duplicate acknowledged entries, and its fix."""

    policy: str
    detail: str
    fix: str

    def __str__(self) -> str:
        return f"{self.detail} (fix: {self.fix})"


@dataclass(frozen=True)
class TopicState:
    """What the topic held before this open touched its cursor."""

    exists: bool
    has_cursor: bool
    has_entries: bool


async def topic_state(admin: PulsarAdmin, topic: str, cursor: str) -> TopicState:
    """Read, before the cursor is (re)created, whether it was there and the log was not empty."""
    path = PulsarAdmin.topic_path(topic)
    subscriptions, stats = await asyncio.gather(
        admin.get(f"{path}/subscriptions"), admin.get(f"{path}/internalStats")
    )
    if subscriptions is None:
        return TopicState(exists=False, has_cursor=False, has_entries=False)
    has_entries = False
    if isinstance(stats, dict):
        last = str(stats.get("lastConfirmedEntry", ""))
        _, _, entry = last.partition(":")
        has_entries = int(stats.get("numberOfEntries") or 0) > 0 or (
            entry.lstrip("-").isdigit() and int(entry) >= 0
        )
    return TopicState(exists=True, has_cursor=cursor in subscriptions, has_entries=has_entries)


async def inspect_topic(
    admin: PulsarAdmin, topic: str, cursor: str, before: TopicState
) -> list[PolicyFinding]:
    """Every policy applied to ``topic`` that would defeat the cursor; see the module."""
    path = PulsarAdmin.topic_path(topic)
    name = topic.partition("://")[2]
    namespace = "/".join(name.split("/")[:2])
    ttl, quotas, retention, dedup = await asyncio.gather(
        admin.get(f"{path}/messageTTL?applied=true"),
        admin.get(f"{path}/backlogQuotaMap?applied=true"),
        admin.get(f"{path}/retention?applied=true"),
        admin.get(f"{path}/deduplicationEnabled?applied=true"),
    )
    found: list[PolicyFinding] = []
    if isinstance(ttl, int) and ttl > 0:
        found.append(
            PolicyFinding(
                "message-ttl",
                f"a message TTL of {ttl} s acknowledges the WAL's backlog on {name}, "
                "and the broker then deletes it",
                f"pulsar-admin namespaces remove-message-ttl {namespace} "
                f"(and topicPolicies remove-message-ttl {name} if set on the topic)",
            )
        )
    for kind, quota in (quotas or {}).items() if isinstance(quotas, dict) else ():
        if _evicts(quota):
            found.append(
                PolicyFinding(
                    "backlog-eviction",
                    f"a {kind} backlog quota with consumer_backlog_eviction "
                    f"({_limit(quota)}) moves the WAL's cursor past unread entries of {name}",
                    f"pulsar-admin namespaces remove-backlog-quota {namespace} "
                    f"--backlogQuotaType {kind}, or use the producer_request_hold or "
                    "producer_exception policy",
                )
            )
    if before.exists and before.has_entries and not before.has_cursor and not _unbounded(retention):
        found.append(
            PolicyFinding(
                "cursor-missing",
                f"{name} holds entries but the WAL's subscription {cursor!r} is gone, and "
                f"the namespace's retention ({_retention(retention)}) does not keep what no "
                "subscription holds: entries may already be deleted",
                f"check the log with `streamwal verify`; then open with "
                f"pulsar.on_unsafe_policy: warn, or set unbounded retention "
                f"(pulsar-admin namespaces set-retention {namespace} --time -1 --size -1); "
                f"never delete the subscription {cursor!r}",
            )
        )
    if dedup is False:
        found.append(
            PolicyFinding(
                DEDUPLICATION,
                f"broker deduplication is off for {name}: a producer that reconnects "
                "writes again what the broker had already persisted, behind later entries",
                f"pulsar-admin namespaces set-deduplication {namespace} --enable "
                f"(and remove a topic-level override: topicPolicies remove-deduplication {name})",
            )
        )
    return found


def enforce(
    channel: str,
    findings: list[PolicyFinding],
    *,
    unsafe: PolicyAction,
    no_deduplication: PolicyAction,
) -> None:
    """Warn about or refuse each finding, as configured for its kind."""
    refused: list[PolicyFinding] = []
    for finding in findings:
        action = no_deduplication if finding.policy == DEDUPLICATION else unsafe
        if action is PolicyAction.REFUSE:
            refused.append(finding)
        elif action is PolicyAction.WARN:
            _log.warning("channel %s: %s [%s]", channel, finding, finding.policy)
    if refused:
        raise refusal(channel, refused)


def refusal(channel: str, refused: list[PolicyFinding]) -> UnsafeBrokerPolicyError:
    setting = (
        "pulsar.on_no_deduplication"
        if all(f.policy == DEDUPLICATION for f in refused)
        else "pulsar.on_unsafe_policy"
    )
    reasons = "; ".join(str(f) for f in refused)
    return UnsafeBrokerPolicyError(
        channel,
        tuple(f.policy for f in refused),
        f"channel {channel!r} is not opened for writing: {reasons}. "
        f"To open it anyway, set {setting}: warn",
    )


def _evicts(quota: Any) -> bool:
    if not isinstance(quota, dict) or quota.get("policy") != "consumer_backlog_eviction":
        return False
    size = quota.get("limitSize", quota.get("limit", -1))
    return (isinstance(size, int) and size >= 0) or int(quota.get("limitTime") or -1) >= 0


def _limit(quota: dict[str, Any]) -> str:
    parts = []
    if int(quota.get("limitSize", -1) or -1) >= 0:
        parts.append(f"{quota['limitSize']} bytes")
    if int(quota.get("limitTime", -1) or -1) >= 0:
        parts.append(f"{quota['limitTime']} s")
    return " / ".join(parts) or "limit set"


def _unbounded(retention: Any) -> bool:
    if not isinstance(retention, dict):
        return False
    return (
        retention.get("retentionTimeInMinutes") == -1 and retention.get("retentionSizeInMB") == -1
    )


def _retention(retention: Any) -> str:
    if not isinstance(retention, dict):
        return "none"
    return (
        f"{retention.get('retentionTimeInMinutes', 0)} min, "
        f"{retention.get('retentionSizeInMB', 0)} MB"
    )
