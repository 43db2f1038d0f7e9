"""Which channels' series ``/metrics`` leaves out: those this process gave up.

A channel's instruments keep every attribute set they ever saw (the SDK's cumulative
aggregation has no "forget"), so a node that closed a channel would keep exporting
its last counts, gauges and latencies as if it still served it: an alert on the old
owner, a dashboard summing two owners. The channel manager says when a channel is
given up and when it is opened again; the exposition drops the series whose
``channel`` label names a given-up channel (series of a client, ``streamwal_client_*``,
are the caller's view, not an owner's, and stay).

Written from the event loop, read from the HTTP thread: the hidden set is replaced
whole, never changed in place, so a scrape reads one consistent set without a lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["ScopedRegistry", "given_up", "hidden_channels", "opened"]

#: the label a per-channel series carries
CHANNEL_LABEL = "channel"
#: series that describe a caller, not an owner: never hidden
_KEPT_PREFIX = "streamwal_client_"

#: per channel: how many channel managers of this process hold it (several nodes may
#: share a process: one giving a channel up while another took it over hides nothing)
_holders: dict[str, int] = {}
_hidden: frozenset[str] = frozenset()


def given_up(channel: str) -> None:
    """A channel manager of this process let ``channel`` go: once none holds it, its
    series stop."""
    global _hidden
    left = _holders.get(channel, 0) - 1
    _holders[channel] = max(0, left)
    if left <= 0:
        _hidden = _hidden | {channel}


def opened(channel: str) -> None:
    """A channel manager of this process holds ``channel`` (again): its series show
    (counters continue where they were)."""
    global _hidden
    _holders[channel] = _holders.get(channel, 0) + 1
    if channel in _hidden:
        _hidden = _hidden - {channel}


def hidden_channels() -> frozenset[str]:
    return _hidden


class ScopedRegistry:
    """A ``prometheus_client`` registry as the exposition sees it, less the series of
    given-up channels (and families left with no series)."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Any]:
        hidden = _hidden
        for family in self._registry.collect():
            if not hidden or family.name.startswith(_KEPT_PREFIX):
                yield family
                continue
            samples = [s for s in family.samples if s.labels.get(CHANNEL_LABEL) not in hidden]
            if len(samples) == len(family.samples):
                yield family
            elif samples:
                yield _with_samples(family, samples)


def _with_samples(family: Any, samples: Iterable[Any]) -> Any:
    from prometheus_client.metrics_core import Metric

    copy = Metric(family.name, family.documentation, family.type, family.unit)
    copy.samples = list(samples)
    return copy
