"""How the cluster tools time a failover and pace their writers (no cluster needed)."""

from __future__ import annotations

import asyncio
from typing import Any

from streamwal.errors import ChannelNotFoundError
from streamwal_lab.bench.cluster_run import ChannelWriter


def test_a_failover_ends_at_the_first_ack_of_an_append_sent_after_the_kill() -> None:
    writer = ChannelWriter(client=Any, channel="c")  # type: ignore[arg-type]
    # sent at 1.0, answered by the dying node at 2.01, just after the kill at 2.0;
    # then an append sent at 2.02 and answered by the new owner at 5.5
    writer.sent_times = [1.0, 2.02]
    writer.ack_times = [2.01, 5.5]
    assert writer.first_ack_after(2.0) == 5.5
    assert writer.first_ack_after(0.5) == 2.01
    assert writer.first_ack_after(6.0) is None


class _Refusing:
    """A cluster client whose every append fails at once (no owner, nothing sent)."""

    def __init__(self) -> None:
        self.calls = 0

    async def produce(self, channel: str, payload: bytes) -> Any:
        self.calls += 1
        raise ChannelNotFoundError(channel)


async def test_a_writer_whose_appends_fail_at_once_pauses_instead_of_spinning() -> None:
    # issue 26: a writer that retried at once recorded failures (and spans) as fast as
    # the loop ran, for as long as the fault lasted
    client = _Refusing()
    writer = ChannelWriter(client, "c", pause_s=0.05)  # type: ignore[arg-type]
    writer.start()
    await asyncio.sleep(0.5)
    await writer.stop()
    assert 3 <= client.calls <= 15
    assert len(writer.failures) == client.calls
