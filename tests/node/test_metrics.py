"""The /metrics endpoint serves the families users watch, with plausible values."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from streamwal.node.client import NodeClient, policy
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, free_port, metrics_node

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[str, float]:
    """``{'name{labels}': value}`` of every sample on the endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


def value(samples: dict[str, float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    total, found = 0.0, False
    for key, v in samples.items():
        if not re.fullmatch(rf"{re.escape(name)}(\{{.*\}})?", key):
            continue
        if all(f'{k}="{want}"' in key for k, want in labels.items()):
            total += v
            found = True
    names = sorted({k.split("{")[0] for k in samples if k.startswith("streamwal")})
    assert found, f"no sample {name} {labels}; families: {names}"
    return total


async def test_metrics_after_traffic(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    ports = [free_port(), free_port()]
    prefix = etcd_prefix("metrics")  # the oracle's; the channels' terms live under it
    common = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "wal": {"buffer_capacity_bytes": 2048},  # small: traffic must evict
        # no append's trace is sampled: the metrics below must count every one anyway,
        # the refused one included
        "tracing": {"sampler": "parentbased_traceidratio", "ratio": 0.0},
    }
    one = NodeProcess(
        tmp_path,
        1,
        {
            **common,
            "node": {"metrics_listen": f"127.0.0.1:{ports[0]}"},
            "tso": {"key_prefix": prefix},
        },
    )
    await one.start()
    two = NodeProcess(
        tmp_path,
        2,
        {
            **common,
            "node": {"metrics_listen": f"127.0.0.1:{ports[1]}"},
            "tso": {"mode": "remote", "remote_addresses": [one.address], "key_prefix": prefix},
        },
    )
    await two.start()
    channel = f"metrics-{unique}"
    try:
        async with NodeClient(one.address) as c1, NodeClient(two.address) as c2:
            await c1.assign(channel)
            for i in range(40):
                await c1.produce(channel, b"p" * 100 + str(i).encode().rjust(4, b"0"))
            seen = 0
            async for _ in c1.consume(channel, policy("all")):
                seen += 1
                if seen == 41:
                    break
            await c2.assign(channel)  # fences node 1
            with pytest.raises(grpc.aio.AioRpcError):
                await c1.produce(channel, b"late")
            for i in range(10):
                await c2.produce(channel, f"two-{i}".encode())
            await asyncio.sleep(1.0)  # let a periodic tick run
            m1, m2 = scrape(ports[0]), scrape(ports[1])
    finally:
        await two.terminate()
        await one.terminate()

    assert value(m1, "streamwal_wal_appends_total", channel=channel, outcome="ok") == 40
    assert value(m1, "streamwal_wal_append_bytes_total", channel=channel) == 40 * 104
    assert value(m1, "streamwal_wal_append_duration_seconds_count", channel=channel) == 40
    assert value(m1, "streamwal_wal_append_duration_seconds_sum", channel=channel) > 0
    # appends on loopback take well under a second: the buckets are in seconds
    under_a_second = value(
        m1, "streamwal_wal_append_duration_seconds_bucket", channel=channel, le="1.0"
    )
    assert under_a_second == 40
    assert value(m1, "streamwal_wal_fenced_total", channel=channel) == 1
    failed = value(m1, "streamwal_wal_appends_total", channel=channel) - 40
    assert failed == 1, "the refused (unsampled) append is counted"
    assert value(m1, "streamwal_wal_first_time_tick_attempts_total", outcome="ok") == 1
    assert value(m1, "streamwal_wal_open_duration_seconds_count", outcome="ok") == 1
    assert value(m1, "streamwal_wal_scanner_lag_seconds_count", channel=channel) >= 41
    assert value(m1, "streamwal_wal_buffer_evictions_total", channel=channel) > 0
    assert value(m1, "streamwal_tso_allocation_fetch_duration_seconds_count") >= 1
    assert value(m2, "streamwal_wal_appends_total", channel=channel, outcome="ok") == 10
    # series carry their own labels only, not the instrumentation scope's three
    assert not [key for key in (*m1, *m2) if "otel_scope_" in key]
    assert 0 < value(m2, "streamwal_wal_buffer_size_bytes", channel=channel) <= 2048


async def test_batches_are_sampled_once(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    """A batch append is one latency sample and a batched read delivers many messages per
    lag sample (its oldest message's), while every message is counted: a histogram costs
    a batch one sample, not one each."""
    node, port = metrics_node(tmp_path, stack.pulsar_url, stack.etcd_endpoint, etcd_prefix("lag"))
    await node.start()
    channel = f"lag-{unique}"
    inserts = 300
    try:
        async with NodeClient(node.address) as client:
            await client.assign(channel)
            await client.produce_batch(channel, [b"m%d" % i for i in range(inserts)])
            before = scrape(port)
            seen = read = frames = 0
            async for frame in client.consume_batches(channel, policy("all"), timeout=30):
                frames += 1
                read += len(frame)
                seen += sum(1 for m in frame if m.type == "insert")
                if seen == inserts:
                    break
            await asyncio.sleep(0.5)  # the read-ahead may deliver a little more, then waits
            after = scrape(port)
    finally:
        await node.terminate()

    def delta(name: str) -> float:
        return value(after, name, channel=channel) - (
            value(before, name, channel=channel) if _has(before, name, channel) else 0.0
        )

    assert value(before, "streamwal_wal_appends_total", channel=channel, outcome="ok") == inserts
    assert value(before, "streamwal_wal_append_bytes_total", channel=channel) == sum(
        len(b"m%d" % i) for i in range(inserts)
    )
    assert value(before, "streamwal_wal_append_batch_duration_seconds_count", channel=channel) == 1
    assert not _has(before, "streamwal_wal_append_duration_seconds_count", channel)
    delivered = delta("streamwal_wal_scanner_delivered_total")
    samples = delta("streamwal_wal_scanner_lag_seconds_count")
    assert delivered >= read > inserts  # the first time tick and the batch's, too
    assert 1 <= samples < delivered / 4, (samples, delivered, frames)


def _has(samples: dict[str, float], name: str, channel: str) -> bool:
    return any(k.startswith(name) and f'channel="{channel}"' in k for k in samples)
