"""Which channels' series ``/metrics`` leaves out: those this process gave up.

A channel's instruments keep every attribute set they ever saw (the SDK's cumulative
aggregation has no "forget"), so a node that closed a channel would keep exporting
its gauges (buffer size, consumer backlog and lag) as if it still served it: an alert
on the old owner, a dashboard summing two owners. The channel manager says when a
channel is given up and when it is opened again; the exposition drops the gauge
series whose ``channel`` label names a given-up channel at once, and its counters and
histograms :data:`COUNTER_RETENTION_S` later: dropped at once, the last increments
(the fence that took the channel, an append it refused) would be lost to a scraper
that had not read them yet. Series of a client (``streamwal_client_*``) are the
caller's view, not an owner's, and stay.

Written from the event loop, read from the HTTP thread: the given-up map is replaced
whole, never changed in place, so a scrape reads one consistent map without a lock.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["COUNTER_RETENTION_S", "ScopedRegistry", "given_up", "hidden_channels", "opened"]

#: how long counters and histograms of a given-up channel stay: a few scrape intervals
COUNTER_RETENTION_S = 300.0
#: the label a per-channel series carries
CHANNEL_LABEL = "channel"
#: series that describe a caller, not an owner: never hidden
_KEPT_PREFIX = "streamwal_client_"

#: per channel: how many channel managers of this process hold it (several nodes may
#: share a process: one giving a channel up while another took it over hides nothing)
_holders: dict[str, int] = {}
#: given-up channels, and when (monotonic seconds)
_given_up: Mapping[str, float] = {}


def given_up(channel: str) -> None:
    """A channel manager of this process let ``channel`` go: once none holds it, its
    series stop (see the module docstring)."""
    global _given_up
    left = _holders.get(channel, 0) - 1
    _holders[channel] = max(0, left)
    if left <= 0:
        _given_up = {**_given_up, channel: time.monotonic()}


def opened(channel: str) -> None:
    """A channel manager of this process holds ``channel`` (again): its series show
    (counters continue where they were)."""
    global _given_up
    _holders[channel] = _holders.get(channel, 0) + 1
    if channel in _given_up:
        _given_up = {c: at for c, at in _given_up.items() if c != channel}


def hidden_channels(kind: str, now: float | None = None) -> frozenset[str]:
    """The channels whose series of Prometheus type ``kind`` are left out now."""
    given = _given_up
    if kind == "gauge":
        return frozenset(given)
    now = time.monotonic() if now is None else now
    return frozenset(c for c, at in given.items() if now - at >= COUNTER_RETENTION_S)


class ScopedRegistry:
    """A ``prometheus_client`` registry as the exposition sees it, less the series of
    given-up channels (and families left with no series)."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Any]:
        now = time.monotonic()
        for family in self._registry.collect():
            hidden = hidden_channels(family.type, now)
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
