"""Terms and fenced channels on two node processes sharing the real broker and etcd."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from streamwal.errors import ChannelNotFoundError, StaleTermError
from streamwal.node.client import NodeClient
from streamwal.node.client_errors import NodeFencedError, NodeStaleTermError
from streamwal.node.terms import EtcdTerms
from streamwal.tso.config import EtcdConfig
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, running, streamwal_cli
from tests.node.test_terms_grpc import _every_write

pytestmark = pytest.mark.integration


@pytest.fixture
async def nodes(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> AsyncIterator[tuple[NodeProcess, NodeProcess, str]]:
    """Nodes 1 (the TSO in-process) and 2 (its timestamps from node 1), without a
    cluster, keeping terms under one prefix; and that prefix."""
    prefix = etcd_prefix("terms")
    common = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
    }
    one = NodeProcess(tmp_path, 1, {**common, "tso": {"mode": "in-process", "key_prefix": prefix}})
    two = NodeProcess(
        tmp_path,
        2,
        {
            **common,
            "tso": {"mode": "remote", "remote_addresses": [one.address], "key_prefix": prefix},
        },
    )
    async with running(one), running(two):
        yield one, two, prefix


async def test_a_higher_term_fences_and_a_stale_one_is_refused(
    nodes: tuple[NodeProcess, NodeProcess, str], channel: str, stack: StackInfo
) -> None:
    one, two, prefix = nodes
    async with NodeClient(one.address) as a, NodeClient(two.address) as b:
        assert (await a.assign(channel, term=1)).term == 1
        await a.produce(channel, b"a's")
        txn = await a.begin_txn(channel, "v")
        assert (await b.assign(channel, term=2)).term == 2  # a is fenced
        await b.produce(channel, b"b's")

        for _ in range(3):  # every write of every shape, every time
            for error in await _every_write(a, txn, channel):
                assert isinstance(error, NodeFencedError), repr(error)
                assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
            listed = await a.list_channels()
            assert [(c.pchannel, c.fenced, c.term) for c in listed.channels] == [(channel, True, 1)]
        assert [(c.pchannel, c.fenced, c.term) for c in (await b.list_channels()).channels] == [
            (channel, False, 2)
        ]

        # a's term is stale: refused, and b keeps the channel
        with pytest.raises(StaleTermError) as stale:
            await a.assign(channel, term=1)
        assert isinstance(stale.value, NodeStaleTermError)
        assert (stale.value.details() or "").startswith("stale term"), stale.value.details()
        assert (await b.assign(channel, term=2)).term == 2  # the holder, again: accepted
        await b.produce(channel, b"b's again")

        # the term is in etcd, under the nodes' prefix
        async with EtcdTerms(EtcdConfig(endpoints=(stack.etcd_endpoint,)), prefix) as terms:
            held = await terms.read(channel)
        assert held is not None and (held.term, held.node) == (2, 2)

        # and in `channel status`, read with node 1's file
        status = await streamwal_cli(
            "channel", "status", channel, "--json", "--config", str(one.config_path)
        )
        assert status.returncode == 0, status
        shown = json.loads(status.stdout)
        assert (shown["term"], shown["term_node"]) == (2, 2), shown
        text = await streamwal_cli("channel", "status", channel, "--config", str(one.config_path))
        assert text.returncode == 0, text
        assert text.stdout.splitlines()[0].endswith(", term 2 (node 2)"), text.stdout

        # the CLI: a term that is not a number is bad input (nothing sent), a stale one
        # refused
        for bad in ("two", "-1", "1.5"):
            refused = await streamwal_cli(
                "channel", "assign", channel, "--node", one.address, "--term", bad
            )
            assert refused.returncode == 2, refused
            assert "--term" in refused.stderr, refused.stderr
        stale_cli = await streamwal_cli(
            "channel", "assign", channel, "--node", one.address, "--term", "1"
        )
        assert stale_cli.returncode == 1, stale_cli
        assert "stale term" in stale_cli.stderr, stale_cli.stderr
        assert [(c.pchannel, c.fenced) for c in (await a.list_channels()).channels] == [
            (channel, True)
        ]

        # RemoveChannel on a drops it: then it is not there at all
        await a.remove(channel)
        assert list((await a.list_channels()).channels) == []
        with pytest.raises(ChannelNotFoundError):
            await a.produce(channel, b"x")

        # the CLI takes it over with a higher term
        taken = await streamwal_cli(
            "channel", "assign", channel, "--node", one.address, "--term", "3", "--json"
        )
        assert taken.returncode == 0, taken
        assert json.loads(taken.stdout)["term"] == 3
        await a.produce(channel, b"a's again")
        with pytest.raises(NodeFencedError):
            await b.produce(channel, b"b fenced")
