"""The channels suite: one node with 1, 16, 64, 256 open channels.

Each (mode, channel count) point runs in a process of its own
(:mod:`streamwal_lab.bench.channels_worker`), WAL then raw, so memory is measured on a fresh
heap and the two modes never share a client. Per point: total append throughput of
``max(min_appenders, N)`` appenders spread over the channels, resident memory per open
channel, and, for WALs, the persisted time ticks of idle channels (a WAL persists a
periodic time tick only when data was appended since the last one, so an idle
channel should cost none) and the CPU the idle node burns.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from streamwal_lab.bench.stats import ratio
from streamwal_lab.bench.target import BenchTarget
from streamwal_lab.stack.process import die_with_parent

__all__ = ["DEFAULT_CHANNELS", "run_channels_bench"]

DEFAULT_CHANNELS = (1, 16, 64, 256)
_WORKER_TIMEOUT_S = 600.0


async def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        *die_with_parent(),
        sys.executable,
        "-m",
        "streamwal_lab.bench.channels_worker",
        json.dumps(spec),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), _WORKER_TIMEOUT_S)
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-15:]
        raise RuntimeError(
            f"channels worker {spec['mode']} x{spec['channels']} exited with "
            f"{proc.returncode}:\n" + "\n".join(tail)
        )
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def run_channels_bench(
    target: BenchTarget,
    *,
    channels: Sequence[int] = DEFAULT_CHANNELS,
    seconds: float = 3.0,
    idle_s: float = 2.0,
    min_appenders: int = 32,
    payload_bytes: int = 128,
) -> dict[str, Any]:
    """Every channel count, WAL and raw; see the module docstring."""
    points: list[dict[str, Any]] = []
    for count in channels:
        pair: dict[str, dict[str, Any]] = {}
        for mode in ("wal", "raw"):
            pair[mode] = await _worker(
                {
                    "mode": mode,
                    "channels": count,
                    "appenders": max(min_appenders, count),
                    "seconds": seconds,
                    "idle_s": idle_s,
                    "payload_bytes": payload_bytes,
                    "pulsar_url": target.pulsar_url,
                    "etcd_endpoint": target.etcd_endpoint,
                }
            )
        wal, raw = pair["wal"], pair["raw"]
        points.append(
            {
                "channels": count,
                "appenders": wal["appenders"],
                "wal": wal,
                "raw": raw,
                "throughput_ratio": ratio(wal["throughput"]["per_s"], raw["throughput"]["per_s"]),
            }
        )
        target.progress(
            f"channels x{count:<3}: wal {wal['throughput']['per_s']:>8.0f}/s "
            f"raw {raw['throughput']['per_s']:>8.0f}/s; "
            f"{wal['rss_per_channel_mib']} MiB/channel (raw {raw['rss_per_channel_mib']}); "
            f"idle ticks/channel/interval {wal['idle']['persisted_ticks_per_channel_per_interval']}"
        )
    return {
        "seconds": seconds,
        "idle_s": idle_s,
        "min_appenders": min_appenders,
        "payload_bytes": payload_bytes,
        "points": points,
    }
