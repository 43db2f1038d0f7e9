"""One retry schedule: every hand-written loop of the clients takes its waits from
:class:`streamwal.backoff.Backoff`, with the schedule it had before."""

from __future__ import annotations

import itertools

import pytest

import streamwal.tso.etcd_store as etcd_store
import streamwal.tso.remote as remote
from streamwal.backoff import Backoff
from streamwal.cluster.client import ClusterClient
from streamwal.errors import InvalidInputError
from streamwal.node.client import retries as node_client_retries
from streamwal.wal import Backoff as WalBackoff
from streamwal.wal.config import Backoff as WalConfigBackoff


def _first(backoff: Backoff, n: int = 8) -> list[float]:
    return [round(d, 6) for d in itertools.islice(backoff.delays(), n)]


def _doubling(first: float, cap: float, n: int = 8) -> list[float]:
    """The loops' old arithmetic: ``first``, then ``min(delay * 2, cap)``."""
    out, delay = [], first
    for _ in range(n):
        out.append(round(delay, 6))
        delay = min(delay * 2, cap)
    return out


def test_one_class_wherever_it_is_imported_from() -> None:
    assert WalBackoff is WalConfigBackoff is Backoff


def test_the_node_client_backs_off_from_50_ms_to_1_s() -> None:
    old = [round(min(1.0, 0.05 * 2 ** (attempt - 1)), 6) for attempt in range(1, 9)]
    assert _first(node_client_retries._RETRY_BACKOFF) == old


def test_the_tso_clients_keep_their_schedules() -> None:
    assert _first(remote._RETRY_BACKOFF) == _doubling(0.02, 0.25)
    assert _first(etcd_store._RETRY_BACKOFF) == _doubling(0.05, 0.5)


def test_the_cluster_client_backs_off_from_50_ms_to_max_backoff() -> None:
    client = ClusterClient(nodes=["127.0.0.1:1"], tracing=False)
    assert _first(client._backoff) == _doubling(0.05, 0.25)
    wide = ClusterClient(nodes=["127.0.0.1:1"], tracing=False, max_backoff_s=2.0)
    assert _first(wide._backoff) == _doubling(0.05, 2.0)
    # a cap below the first wait caps it too
    narrow = ClusterClient(nodes=["127.0.0.1:1"], tracing=False, max_backoff_s=0.01)
    assert _first(narrow._backoff, 3) == [0.01, 0.01, 0.01]


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_the_cluster_client_refuses_a_cap_that_is_not_positive(bad: float) -> None:
    with pytest.raises(InvalidInputError, match="max_backoff_s"):
        ClusterClient(nodes=["127.0.0.1:1"], tracing=False, max_backoff_s=bad)
