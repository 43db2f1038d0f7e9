"""Three node processes sharing one TSO, as in docs/deploy.md: channels move around."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from streamwal.node.client import NodeClient
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import verify_channel
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration


async def test_three_nodes_one_tso_channels_move(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    common = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
    }
    # one deployment, one prefix: the remote-TSO nodes keep the channels' terms beside
    # the oracle's (a node that kept them elsewhere would open under a lower term: the
    # checker's term-decreased)
    prefix = etcd_prefix("dep")
    oracle = NodeProcess(
        tmp_path, 1, {**common, "tso": {"mode": "in-process", "key_prefix": prefix}}
    )
    await oracle.start()
    nodes = [oracle]
    for node_id in (2, 3):
        node = NodeProcess(
            tmp_path,
            node_id,
            {
                **common,
                "tso": {
                    "mode": "remote",
                    "remote_addresses": [oracle.address],
                    "key_prefix": prefix,
                },
            },
        )
        await node.start()
        nodes.append(node)
    channels = [f"dep-{unique}-{i}" for i in range(3)]
    acks: dict[str, list[Ack]] = {c: [] for c in channels}
    clients = [NodeClient(n.address) for n in nodes]
    try:
        # three rounds: channel i lives on node (i + round) % 3
        for round_ in range(3):
            for i, channel in enumerate(channels):
                owner = clients[(i + round_) % 3]
                await owner.assign(channel)
                for seq in range(20):
                    payload = f"{channel}/r{round_}/{seq}".encode()
                    a = await owner.produce(channel, payload)
                    acks[channel].append(Ack(a.message_id, a.time_tick, digest(payload)))
        # Both earlier owners of each channel were fenced when it moved away, and
        # neither has touched it since. A quiet WAL learns of its fence only when it
        # next writes (streamwal/node/channels.py): its first refusal is
        # FAILED_PRECONDITION, and so is every later one, until the channel is removed
        # there (docs/deploy.md).
        for i, channel in enumerate(channels):
            for stale in (clients[i % 3], clients[(i + 1) % 3]):
                for _ in range(2):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stale.produce(channel, b"stale")
                    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, (
                        err.value.details()
                    )
        # now every channel is owned by exactly one node, its last owner, and listed as
        # fenced by the two before it
        listings = [await c.list_channels() for c in clients]
        for i, channel in enumerate(channels):
            holders = {
                n: [c.fenced for c in listing.channels if c.pchannel == channel]
                for n, listing in enumerate(listings)
            }
            assert holders == {i % 3: [True], (i + 1) % 3: [True], (i + 2) % 3: [False]}, (
                channel,
                holders,
            )
    finally:
        for client in clients:
            await client.close()
        for node in reversed(nodes):
            assert await node.terminate() == 0
    for i, channel in enumerate(channels):
        acks_file = tmp_path / f"{channel}.jsonl"
        acks_file.write_text("".join(a.to_json() + "\n" for a in acks[channel]))
        report = await verify_channel(stack.pulsar_url, channel, acks_file)
        assert report.ok, report.summary()
        assert report.acks_checked == 60
        assert [n for n, _ in report.owners] == [(i + r) % 3 + 1 for r in range(3)]
