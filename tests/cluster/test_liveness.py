"""Evidence of death: a refused port, how many refusals, what is declared and what not."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from unittest.mock import create_autospec

import pytest

from streamwal.cluster.liveness import Probe, Prober, probe
from streamwal.cluster.placement import plan_round
from streamwal.cluster.records import (
    Assignment,
    ClusterKeys,
    Drain,
    Lost,
    MoveReason,
    NodeRecord,
    decode,
    encode,
)
from streamwal.cluster.store import ClusterStore, LeaseTTL
from streamwal.cluster.view import ClusterView, read_view


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def listening() -> AsyncIterator[str]:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"127.0.0.1:{port}"
    server.close()
    await server.wait_closed()


async def test_a_port_nobody_listens_on_is_refused_and_a_listening_one_answers(
    listening: str,
) -> None:
    assert await probe(listening, 1.0) == Probe.OK
    assert await probe(f"127.0.0.1:{_closed_port()}", 1.0) == Probe.REFUSED
    assert await probe("[::1]:x", 1.0) == Probe.UNKNOWN  # says nothing, not "dead"


class _Store:
    """Records declarations; the guard (the probed record still current) is etcd's.
    The stand-in is built from :class:`ClusterStore` itself (autospec), so a call the
    real store's signature would refuse fails here too instead of passing a hand copy."""

    def __init__(self) -> None:
        self.spec = create_autospec(ClusterStore, instance=True)
        self.spec.lease_ttls.side_effect = lambda ids, **_: dict.fromkeys(ids, LeaseTTL(5, 3))
        self.spec.declare_lost.return_value = True

    @property
    def declared(self) -> list[tuple[str, int, str, Lost, int]]:
        return [
            (node_key, revision, lost_key, decode(Lost, value), lease)
            for node_key, revision, lost_key, value, lease in (
                call.args for call in self.spec.declare_lost.await_args_list
            )
        ]


def _view(addresses: dict[int, str], *, started: int = 100) -> ClusterView:
    view = ClusterView(revision=50)
    for node, address in addresses.items():
        view.nodes[node] = NodeRecord(node, address, "0", started)
        view.node_leases[node] = 1000 + node
        view.node_revisions[node] = 10 + node
    return view


def _prober(store: _Store, view: Callable[[], ClusterView | None], refusals: int = 2) -> Prober:
    keys = ClusterKeys("/p")
    return Prober(store.spec, keys, 1, view, interval_s=0.1, refusals=refusals)


async def test_refusals_in_a_row_declare_the_node_with_its_record_and_lease(
    listening: str,
) -> None:
    dead = f"127.0.0.1:{_closed_port()}"
    view = _view({1: "127.0.0.1:1", 2: dead, 3: listening})
    store = _Store()
    prober = _prober(store, lambda: view)
    await prober.round()
    assert store.declared == []  # one refusal is not yet enough
    await prober.round()
    assert len(store.declared) == 1
    node_key, revision, lost_key, lost, lease = store.declared[0]
    assert (node_key, revision, lost_key, lease) == (
        "/p/cluster/nodes/2",
        12,
        "/p/cluster/lost/2",
        1002,
    )
    assert (lost.node, lost.started_at_ms, lost.lease, lost.evidence) == (
        2,
        100,
        1002,
        "connection-refused",
    )
    assert lost.refusals == 2 and lost.by == 1
    # the lease had used 2 of its 5 s: renewed about 2 s before the declaration
    assert lost.last_renewal_ms == lost.declared_ms - 2000
    assert lost.first_refused_ms <= lost.declared_ms


async def test_a_live_node_a_draining_node_and_this_node_are_never_declared(
    listening: str,
) -> None:
    dead = f"127.0.0.1:{_closed_port()}"
    view = _view({1: dead, 2: listening, 3: dead})
    view.drains[3] = Drain(3, 100)  # stopping cleanly: it gives up its lease itself
    store = _Store()
    prober = _prober(store, lambda: view)
    for _ in range(4):
        await prober.round()
    assert store.declared == []


async def test_an_answer_in_between_starts_the_count_again_and_a_restart_is_another_node(
    listening: str,
) -> None:
    dead = f"127.0.0.1:{_closed_port()}"
    view = _view({2: dead})
    store = _Store()
    prober = _prober(store, lambda: view, refusals=3)
    await prober.round()
    await prober.round()
    view.nodes[2] = NodeRecord(2, listening, "0", 100)
    await prober.round()  # it answered: the two refusals before count no more
    view.nodes[2] = NodeRecord(2, dead, "0", 100)
    await prober.round()
    await prober.round()
    assert store.declared == []
    view.nodes[2] = NodeRecord(2, dead, "0", 200)  # a new start of node 2
    await prober.round()
    await prober.round()
    assert store.declared == []
    await prober.round()
    assert [d[3].started_at_ms for d in store.declared] == [200]


async def test_no_probes_when_refusals_is_zero() -> None:
    store = _Store()
    prober = _prober(store, lambda: _view({2: f"127.0.0.1:{_closed_port()}"}), refusals=0)
    await prober.start()
    await asyncio.sleep(0.3)
    await prober.close()
    assert store.declared == []


def test_a_node_declared_lost_loses_its_channels_at_once_without_the_grace() -> None:
    view = _view({2: "h:2"})
    view.channels = {"a", "b"}
    view.assignments = {
        "a": Assignment("a", 1, 1, MoveReason.INITIAL, 0),
        "b": Assignment("b", 2, 1, MoveReason.INITIAL, 0),
    }
    grace = 60_000
    assert (
        plan_round(view, now_ms=10_000, absent_since_ms={1: 9_000}, grace_ms=grace, max_moves=1)
        == []
    )  # node 1 gone 1 s, no evidence: it waits out the grace
    view.lost[1] = Lost(1, 100, 1001, "connection-refused", 8_500, 2, 9_000, 2, 7_000)
    [decision] = plan_round(
        view, now_ms=10_000, absent_since_ms={1: 9_000}, grace_ms=grace, max_moves=1
    )
    assert (decision.channel, decision.node, decision.reason) == ("a", 2, MoveReason.NODE_LOST)
    assert decision.lost_at_ms == 8_500
    assert "connection-refused" in decision.detail and "node 2" in decision.detail


@pytest.mark.integration
async def test_a_declaration_needs_the_probed_record_and_a_new_registration_clears_it(
    store: ClusterStore, etcd_prefix: Callable[[str], str]
) -> None:
    keys = ClusterKeys(etcd_prefix("lv"))
    lease, _ = await store.grant_lease(30)
    record = encode(NodeRecord(7, "127.0.0.1:1", "0", 100))
    assert (await store.register(keys.node(7), record, lease, clear=keys.lost + "7"))[0]
    view = await read_view(store, keys)
    lost = encode(Lost(7, 100, lease, "connection-refused", 1, 2, 2, 1, None))
    stale = view.node_revisions[7] - 1
    assert not await store.declare_lost(keys.node(7), stale, keys.lost + "7", lost, lease)
    assert 7 in (await read_view(store, keys)).nodes  # nothing written, nothing revoked
    current = view.node_revisions[7]
    assert await store.declare_lost(keys.node(7), current, keys.lost + "7", lost, lease)
    view = await read_view(store, keys)
    assert 7 not in view.nodes and view.lost[7].lease == lease  # the lease went with it
    again, _ = await store.grant_lease(30)
    assert (await store.register(keys.node(7), record, again, clear=keys.lost + "7"))[0]
    view = await read_view(store, keys)
    assert 7 in view.nodes and view.lost == {}
    await store.revoke_lease(again)
    await store.delete_tree(keys.root)
