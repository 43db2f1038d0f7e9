"""A failover reads whole in Jaeger: after a real kill -9 of an owner in a 3-node
cluster, its channel's failover is one trace whose root, ``cluster.failover``, spans the
outage (the old owner's last lease renewal to the first acknowledged write on the new
owner) and whose parts come in the order they happened: found by refused connections,
and, with the probes off, by the lease running out (its waits then parts of it).

The trace's length is bound by the gap the writers measure (kill to first acknowledged
write): at least 0.8 of it, at most the gap plus one renewal interval (TTL/3: the kill
came at most that long after the last renewal) plus the precision the root says its
start is known to (etcd's whole second; for a lease expiry also the balancer's round)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from streamwal.cluster import ClusterSettings, waits
from streamwal_lab.stack import StackInfo
from tests.cluster.failovers import DEFAULT_TIMES, failover_trace, kill_an_owner
from tests.cluster.spans import capture_module_spans

pytestmark = pytest.mark.integration

_DEFAULTS = ClusterSettings()


async def test_a_killed_owners_failover_is_one_trace_spanning_the_outage(
    telemetry_stack: StackInfo,
    tmp_path: Path,
    etcd_prefix: Callable[[str], str],
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = telemetry_stack
    assert info.otlp_endpoint and info.jaeger_url
    # the writers' spans (this process's), kept here rather than exported
    client_spans = capture_module_spans(monkeypatch, waits)[1]
    channels = [f"fot-{unique}-{i}" for i in range(3)]
    killed = await kill_an_owner(info, tmp_path, etcd_prefix("fot"), channels, **DEFAULT_TIMES)
    parts = ["cluster.evidence", "cluster.move", "wal.open", "cluster.first_write"]
    for channel, gap_s in killed.gaps.items():
        move, root = await failover_trace(info, killed, channel, parts)
        assert root.tags["streamwal.cluster.evidence"].startswith("connection-refused")
        assert root.tags["streamwal.cluster.last_renewal_precision_ms"] == 1000
        # ``streamwal trace failovers`` finds it by its tag and lists its parts in order
        args = ("--channel", channel, "--since", "10m", "--jaeger", info.jaeger_url)
        listed = json.loads(await _trace_cli("failovers", *args, "--json"))
        assert [f["trace_id"] for f in listed] == [move.trace_id], listed
        assert listed[0]["outage_us"] == root.duration_us
        assert (listed[0]["from_node"], listed[0]["to_node"]) == (killed.victim, move.node)
        assert listed[0]["url"].endswith(f"/trace/{move.trace_id}")
        named = [p["operation"] for p in listed[0]["parts"]]
        assert [n for n in named if n in parts] == parts, named
        text = await _trace_cli("failovers", *args)
        assert channel in text and move.trace_id in text and "connection-refused" in text
        # the writer's produce that waited across the failover: why, how long, linked
        follows = [
            s
            for s in client_spans.get_finished_spans()
            if s.name == "cluster.follow"
            and s.attributes is not None
            and s.attributes["streamwal.channel"] == channel
            and s.attributes.get("streamwal.cluster.failover_trace_id") == move.trace_id
        ]
        assert follows, client_spans.get_finished_spans()
        longest = max(follows, key=_waited_ms)
        tags = longest.attributes
        assert tags is not None
        assert tags["streamwal.cluster.wait_reason"] in (waits.OWNER_GONE, waits.MOVED)
        assert _waited_ms(longest) >= 0.5 * gap_s * 1000, (tags, gap_s)
        assert tags["streamwal.cluster.to"] == move.node
        linked = {format(link.context.trace_id, "032x") for link in longest.links}
        assert linked == {move.trace_id}, longest.links


async def test_a_lease_expiry_failover_shows_the_lease_and_the_grace_it_waited(
    telemetry_stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str], unique: str
) -> None:
    info = telemetry_stack
    assert info.otlp_endpoint and info.jaeger_url
    channels = [f"fol-{unique}-{i}" for i in range(3)]
    # no probes: the lease alone tells the node is gone (the default TTL and grace: the
    # lease runs out well after the kill, whatever the moment of the last renewal)
    times = {**DEFAULT_TIMES, "probe_refusals": 0}
    killed = await kill_an_owner(info, tmp_path, etcd_prefix("fol"), channels, **times)
    parts = [
        "cluster.wait.lease",
        "cluster.evidence",
        "cluster.wait.grace",
        "cluster.move",
        "wal.open",
        "cluster.first_write",
    ]
    for channel in killed.gaps:
        _move, root = await failover_trace(info, killed, channel, parts)
        assert root.tags["streamwal.cluster.evidence"] == "lease-expired"
        # etcd's second and the balancer's round
        assert root.tags["streamwal.cluster.last_renewal_precision_ms"] == 1000 + int(
            _DEFAULTS.round_interval_s * 1000
        )


def _waited_ms(span: ReadableSpan) -> int:
    waited = (span.attributes or {}).get("streamwal.cluster.waited_ms")
    assert isinstance(waited, int), span.attributes
    return waited


async def _trace_cli(*args: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "streamwal.cli", "trace", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout
