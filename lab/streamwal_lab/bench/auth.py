"""The auth suite: what checking every call's caller costs a node.

Two nodes run as child processes, alike but for ``auth.enabled``: ``auth_on`` knows
one identity (a bearer token, the producer and admin roles) and checks it on every
call, ``auth_off`` serves everyone. ``callers`` (32) callers each keep one unary
``Produce`` of 128 B in flight, on a channel of each node; the two sides run in turn,
``repeats`` times, interleaved, so a burst from another process hits both, and the
figures are the medians. ``auth_on_vs_off_ratio`` is the appends/s with auth over
without (the target: at least 0.95, a cost of at most 5 %), ``auth_on_p50_vs_off_ratio``
the median latencies' ratio and ``auth_on_cpu_vs_off_ratio`` the nodes' CPU per
append.

The suite deletes the topics and etcd keys it created.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any, Unpack

import yaml

from streamwal.node.client import NodeClient
from streamwal_lab.bench.cpu import CPU_KEY, metered
from streamwal_lab.bench.node_process import node_and_client
from streamwal_lab.bench.sides import Schedule, interleaved, spread
from streamwal_lab.bench.stats import median_of, ratio
from streamwal_lab.bench.target import BenchTarget, Timing, new_run
from streamwal_lab.stack.topics import delete_created, list_topics

__all__ = ["SIDES", "run_auth_bench"]

SIDES = ("auth_off", "auth_on")
_PAYLOAD = 128


def _auth_file(folder: Path, token: str) -> Path:
    token_file = folder / "bench.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    config = folder / "node-auth.yaml"
    identity = {"name": "bench", "roles": ["producer", "admin"], "token_file": str(token_file)}
    config.write_text(yaml.safe_dump({"auth": {"enabled": True, "identities": [identity]}}))
    return config


async def run_auth_bench(
    target: BenchTarget,
    *,
    callers: int = 32,
    **timing: Unpack[Timing],
) -> dict[str, Any]:
    run = new_run()
    schedule = Schedule.of(timing)
    admin = target.pulsar_admin_url
    before = await list_topics(admin) if admin is not None else None
    token = f"bench-{run}-token"
    payload = b"a" * _PAYLOAD
    try:
        with tempfile.TemporaryDirectory(prefix="streamwal-bench-auth-") as folder:
            config_file = _auth_file(Path(folder), token)
            async with (
                node_and_client(
                    target,
                    key_prefix=f"/bench-auth-{run}-auth_off",
                    log_name=f"auth-off-{run}.log",
                ) as auth_off,
                node_and_client(
                    target,
                    key_prefix=f"/bench-auth-{run}-auth_on",
                    log_name=f"auth-on-{run}.log",
                    node_id=2,
                    config_file=config_file,
                    token=token,
                ) as auth_on,
                contextlib.AsyncExitStack() as held,
            ):
                sides = {}
                for side, (node, client) in {"auth_off": auth_off, "auth_on": auth_on}.items():
                    channel = f"bench-auth-{run}-{side}"
                    await client.assign(channel)
                    held.push_async_callback(client.remove, channel)

                    async def unary(
                        data: bytes, client: NodeClient = client, channel: str = channel
                    ) -> object:
                        return await client.produce(channel, data)

                    sides[side] = metered(node.pid, spread([unary] * callers, payload))
                runs = await interleaved(sides, schedule)
    finally:
        if admin is not None and before is not None:
            await delete_created(admin, before, lambda t: run in t)
    medians = {side: median_of(r) for side, r in runs.items()}
    off, on = medians["auth_off"], medians["auth_on"]
    cell: dict[str, Any] = {
        "callers": callers,
        "payload_bytes": _PAYLOAD,
        **schedule.figures(),
        **medians,
        "auth_on_vs_off_ratio": ratio(on["per_s"], off["per_s"]),
        "auth_on_p50_vs_off_ratio": ratio(on["p50_ms"], off["p50_ms"]),
        "auth_on_cpu_vs_off_ratio": ratio(on[CPU_KEY], off[CPU_KEY]),
        "runs": runs,
    }
    target.progress(
        f"auth x{callers} unary Produce: off {off['per_s']:.0f}/s p50 {off['p50_ms']} ms, "
        f"on {on['per_s']:.0f}/s p50 {on['p50_ms']} ms; on/off {cell['auth_on_vs_off_ratio']} "
        f"(CPU/append {cell['auth_on_cpu_vs_off_ratio']})"
    )
    return cell
