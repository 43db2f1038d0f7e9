"""Mutual TLS end to end: two node processes share a TSO over TLS, clients need certs.

Node 1 runs the oracle in-process; node 2 is in remote TSO mode and takes its
timestamps from node 1 over mutual TLS. A channel moved from node 1 to node 2 keeps
strictly increasing time ticks only if both nodes use that one oracle.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from streamwal.errors import UnavailableError
from streamwal.node.client import Acked, NodeClient, policy
from streamwal.tso import ClientTLS, RemoteSource
from streamwal_lab.stack import StackInfo
from tests.node.certs import TestCA
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration


class Certs:
    def __init__(self, folder: Path) -> None:
        self.ca = TestCA(folder)
        # nodes serve and also dial each other's TSO service
        self.node = self.ca.issue("node", server=True, client=True)
        self.client = self.ca.issue("client", server=False, client=True)
        self.node_client_tls = ClientTLS(
            ca_file=self.ca.ca_file, cert_file=self.node.cert_file, key_file=self.node.key_file
        )

    def client_tls(self, **overrides: Any) -> ClientTLS:
        settings: dict[str, Any] = {
            "ca_file": self.ca.ca_file,
            "cert_file": self.client.cert_file,
            "key_file": self.client.key_file,
            **overrides,
        }
        return ClientTLS(**settings)

    def node_settings(self) -> dict[str, Any]:
        return {
            "tls": {
                "cert_file": self.node.cert_file,
                "key_file": self.node.key_file,
                "ca_file": self.ca.ca_file,  # require client certificates from this CA
            }
        }

    def tso_tls(self) -> dict[str, Any]:
        return {
            "ca_file": self.ca.ca_file,
            "cert_file": self.node.cert_file,
            "key_file": self.node.key_file,
        }


@pytest.fixture(scope="module")
async def tls_nodes(
    stack: StackInfo, module_workdir: Path, module_etcd_prefix: Callable[[str], str]
) -> AsyncIterator[tuple[Certs, NodeProcess, NodeProcess]]:
    """Both nodes, shared by the module's tests: none stops them or leaves them changed."""
    tmp_path = module_workdir
    certs = Certs(tmp_path)
    common = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "node": certs.node_settings(),
    }
    prefix = module_etcd_prefix("tls")
    one = NodeProcess(
        tmp_path,
        1,
        {
            **common,
            "tso": {"mode": "in-process", "key_prefix": prefix, "tls": certs.tso_tls()},
        },
    )
    two = NodeProcess(
        tmp_path,
        2,
        {
            **common,
            "tso": {
                "mode": "remote",
                "remote_addresses": [one.address],
                "tls": certs.tso_tls(),
                "key_prefix": prefix,  # the channels' terms live under the oracle's
            },
        },
    )
    try:
        await one.start()
        await two.start()
        yield certs, one, two
    finally:
        # stop both whatever happened; judge the exit codes only afterwards, so a
        # failed start is what gets reported, not the stop that followed it
        two_code = await two.terminate()
        one_code = await one.terminate()
    assert (one_code, two_code) == (0, 0), "a node did not stop cleanly"


async def test_channel_moves_between_mtls_nodes_on_one_tso(
    tls_nodes: tuple[Certs, NodeProcess, NodeProcess], unique: str
) -> None:
    certs, one, two = tls_nodes
    channel = f"tls-move-{unique}"
    acked: list[Acked] = []
    async with (
        NodeClient(one.address, tls=certs.client_tls()) as c1,
        NodeClient(two.address, tls=certs.client_tls()) as c2,
    ):
        first = await c1.assign(channel)
        acked += [await c1.produce(channel, f"one-{i}".encode()) for i in range(10)]
        # node 2's takeover writes its first time tick from node 1's oracle, over mTLS
        second = await c2.assign(channel)
        acked += [await c2.produce(channel, f"two-{i}".encode()) for i in range(10)]
        with pytest.raises(grpc.aio.AioRpcError) as stale:
            await c1.produce(channel, b"stale")
        assert stale.value.code() in (
            grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.NOT_FOUND,
        )

        ticks = [a.time_tick for a in acked]
        assert ticks[0] > first.first_time_tick
        assert ticks[9] < second.first_time_tick < ticks[10]
        assert ticks == sorted(set(ticks)), ticks  # strictly increasing

        got = []
        async for m in c2.consume(channel, policy("all"), timeout=30):
            if m.type != "TimeTick":
                got.append((m.payload, m.time_tick, m.source_node_id))
            if m.message_id == acked[-1].message_id:
                break
        assert got == [(f"one-{i}".encode(), ticks[i], 1) for i in range(10)] + [
            (f"two-{i}".encode(), ticks[10 + i], 2) for i in range(10)
        ]


async def test_tso_service_over_mtls(tls_nodes: tuple[Certs, NodeProcess, NodeProcess]) -> None:
    certs, one, _ = tls_nodes
    async with RemoteSource([one.address], tls=certs.node_client_tls) as source:
        stamps = [await source.fetch(1) for _ in range(5)]
    assert stamps == sorted(set(stamps)), stamps
    no_cert = ClientTLS(ca_file=certs.ca.ca_file)
    async with RemoteSource([one.address], tls=no_cert, timeout_s=1.0) as refused:
        with pytest.raises(UnavailableError):
            await refused.fetch(1)


async def test_clients_without_a_trusted_certificate_are_refused(
    tls_nodes: tuple[Certs, NodeProcess, NodeProcess], tmp_path: Path
) -> None:
    certs, one, _ = tls_nodes
    # the server name override is applied: a name the certificate lacks fails,
    # one it carries (instead of the dialled IP) works
    async with NodeClient(one.address, tls=certs.client_tls(server_name="localhost")) as ok:
        await ok.list_channels()

    other_ca = TestCA(tmp_path, name="other CA")
    stranger = other_ca.issue("stranger", server=False, client=True)
    refused = {
        "no client certificate": ClientTLS(ca_file=certs.ca.ca_file),
        "certificate from another CA": certs.client_tls(
            cert_file=stranger.cert_file, key_file=stranger.key_file
        ),
        "server name not in the certificate": certs.client_tls(server_name="elsewhere.test"),
        "plain text": None,
    }
    for what, tls in refused.items():
        async with NodeClient(one.address, tls=tls, timeout=3.0) as client:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.list_channels()
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, what
