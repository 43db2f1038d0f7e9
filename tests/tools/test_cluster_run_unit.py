"""How the cluster tools time a failover (no cluster needed)."""

from __future__ import annotations

from typing import Any

from streamwal.tools.cluster_run import ChannelWriter


def test_a_failover_ends_at_the_first_ack_of_an_append_sent_after_the_kill() -> None:
    writer = ChannelWriter(client=Any, channel="c")  # type: ignore[arg-type]
    # sent at 1.0, answered by the dying node at 2.01, just after the kill at 2.0;
    # then an append sent at 2.02 and answered by the new owner at 5.5
    writer.sent_times = [1.0, 2.02]
    writer.ack_times = [2.01, 5.5]
    assert writer.first_ack_after(2.0) == 5.5
    assert writer.first_ack_after(0.5) == 2.01
    assert writer.first_ack_after(6.0) is None
