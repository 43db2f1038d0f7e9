"""A cluster node that stops closes the channels it still holds before its lease ends.

Ending the lease first let the balancer give those channels to other nodes at once
(their owner gone), and their fences met this node's closing producers: the broker
deadlock in docs/reliability.md, "Known limits". A node alone in its cluster has
nowhere to drain to, so every channel it holds is one a drain could not move.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from streamwal.cluster.records import ClusterKeys
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import read_view
from streamwal.node.client import NodeClient
from streamwal.node.config import load_config
from streamwal.server.runtime import Node
from streamwal_lab.bench.cluster_run import wait_for_view
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration

NODE_ID = 31


async def test_a_stopping_node_closes_its_channels_while_its_record_still_holds_them(
    stack: StackInfo,
    unique: str,
    etcd_prefix: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = etcd_prefix("stop-order")
    channel = f"stop-order-{unique}"
    path = tmp_path / "node.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "node": {
                    "id": NODE_ID,
                    "listen": "127.0.0.1:0",
                    "metrics_listen": "",
                    "shutdown_grace_s": 2,
                },
                "pulsar": {"service_url": stack.pulsar_url},
                "etcd": {"endpoints": [stack.etcd_endpoint]},
                "tso": {"mode": "in-process", "key_prefix": prefix},
                "cluster": {
                    "enabled": True,
                    "key_prefix": prefix,
                    "lease_ttl_s": 2,
                    "grace_period_s": 1.0,
                    "round_interval_s": 0.2,
                    "poll_interval_s": 0.2,
                    "channels": [channel],
                },
            }
        )
    )
    keys = ClusterKeys(prefix)
    async with ClusterStore([stack.etcd_endpoint]) as store:
        node = Node(load_config(path, environ={}))
        await node.start()
        # what the cluster says of this node when the node begins closing its channels
        record_at_close: list[bool] = []
        try:
            await wait_for_view(
                store, keys, "the channel serving", lambda v: v.serving(channel), 60
            )
            async with NodeClient(node.address) as client:
                await client.produce(channel, b"before the stop")
            manager = node.channels
            close = manager.close

            async def close_and_look() -> None:
                record_at_close.append(NODE_ID in (await read_view(store, keys)).nodes)
                await close()

            monkeypatch.setattr(manager, "close", close_and_look)
        finally:
            await node.close()

        assert record_at_close == [True]
        view = await read_view(store, keys)
        assert NODE_ID not in view.nodes  # and the lease is given up once they are closed
        assert view.assignments[channel].node == NODE_ID  # it had nowhere to go
