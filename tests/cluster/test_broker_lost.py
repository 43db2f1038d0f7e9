"""A node that loses its broker after it was ready: not ready, its channels move, and it
turns ready again once the broker answers (real node processes, the real broker)."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal.cluster.records import MoveReason
from streamwal_lab.faultproxy import FaultProxy
from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster, owners
from tests.node.processes import free_port

pytestmark = pytest.mark.integration

#: node.broker_lost_after_s of the node whose broker goes away
LOST_AFTER_S = 3.0


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_a_node_that_loses_its_broker_turns_not_ready_and_its_channels_move(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str], unique: str
) -> None:
    broker_port = int(stack.pulsar_url.rsplit(":", 1)[1])
    cluster = TestCluster(
        stack, tmp_path, etcd_prefix("lost"), [f"lost-{unique}-{i}" for i in range(4)]
    )
    async with FaultProxy(broker_port) as proxy:
        try:
            await cluster.start(1)
            metrics_port = free_port()
            cluster.extra = {
                "pulsar": {"service_url": f"pulsar://{proxy.url_host}", "operation_timeout_s": 1},
                "node": {
                    "broker_lost_after_s": LOST_AFTER_S,
                    "metrics_listen": f"127.0.0.1:{metrics_port}",
                },
            }
            await cluster.node(2).start()
            cluster.extra = {}
            view = await cluster.wait_balanced()
            held = sorted(c for c, node in owners(view).items() if node == 2)
            assert held and _readyz(metrics_port)[0] == 200

            proxy.set_mode("refuse")
            cut = time.monotonic()
            await asyncio.sleep(LOST_AFTER_S / 2)
            # one failed check is not a lost broker: still ready, still holding
            assert _readyz(metrics_port)[0] == 200
            assert (await cluster.view()).nodes[2].ready
            view = await cluster.wait_for(
                "node 2 not ready and its channels serving on node 1",
                lambda v: (
                    not v.nodes[2].ready
                    and all(v.assignments[c].node == 1 and v.serving(c) for c in held)
                ),
                timeout=30,
            )
            took = time.monotonic() - cut
            assert "lost for" in view.nodes[2].not_ready
            status, body = _readyz(metrics_port)
            assert status == 503 and "broker: lost for" in body, body
            moves = {m.channel: m for _k, m in view.moves if m.channel in held and m.node == 1}
            assert {c: m.reason for c, m in moves.items()} == dict.fromkeys(
                held, MoveReason.NODE_NOT_READY
            )
            assert all("lost for" in m.detail for m in moves.values())
            # the bound: lost_after + one check + the balancer's grace + an open
            print(f"channels moved off node 2 in {took:.1f}s")
            assert took < LOST_AFTER_S + 15, took
            assert "not ready: broker: lost for" in cluster.nodes[2].log_text()

            proxy.set_mode("pass")
            await cluster.wait_for("node 2 ready again", lambda v: v.nodes[2].ready, timeout=30)
            assert _readyz(metrics_port)[0] == 200
            await cluster.wait_balanced()
        finally:
            await cluster.close()
