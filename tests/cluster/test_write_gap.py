"""``streamwal_client_write_gap_seconds``: a ``ClusterClient``'s gap in writes to one
channel, from the first failed try to the first acknowledged write after it, across
calls; reads and a channel that does not exist are no gap."""

from __future__ import annotations

from typing import Any

import pytest

from streamwal.cluster import metrics
from streamwal.cluster.client import ClusterClient
from streamwal.errors import NoSuchChannelError, UnavailableError


class _Recorder:
    def __init__(self) -> None:
        self.samples: list[tuple[float, dict[str, str]]] = []

    def record(self, value: float, attributes: dict[str, str]) -> None:
        self.samples.append((value, attributes))


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    recorder = _Recorder()
    monkeypatch.setattr(metrics, "_write_gap", recorder)
    return recorder


async def test_a_gap_spans_the_tries_and_the_calls_until_a_write_lands(
    recorded: _Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = ClusterClient(nodes=["127.0.0.1:1"], retry_for_s=0.2, max_backoff_s=0.05)

    async def owner(channel: str, *, refresh: bool = False) -> str:
        return "127.0.0.1:1"

    monkeypatch.setattr(client, "owner", owner)
    monkeypatch.setattr(client, "_node", lambda address: None)
    outcomes: list[BaseException | None] = [UnavailableError("down")] * 2 + [None, None]

    async def one_try(_node: Any) -> str:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return "acked"

    assert await client._following("ch", one_try, writes=True) == "acked"
    assert [attrs for _, attrs in recorded.samples] == [{"channel": "ch"}]
    assert recorded.samples[0][0] > 0
    assert await client._following("ch", one_try, writes=True) == "acked"
    assert len(recorded.samples) == 1  # no failure before it: no gap

    # a read that failed and then answered is no write gap
    outcomes[:] = [UnavailableError("down"), None]
    assert await client._following("ch", one_try) == "acked"
    assert len(recorded.samples) == 1

    async def missing(_node: Any) -> str:
        raise NoSuchChannelError("typo", "not in the set")

    with pytest.raises(NoSuchChannelError):
        await client._following("typo", missing, writes=True)
    outcomes[:] = [None]
    assert await client._following("typo", one_try, writes=True) == "acked"
    assert len(recorded.samples) == 1
    await client.close()
