"""The WAL's one record of a fence: the first error wins, listeners hear it once, in
order, and a failing listener does not keep the others from hearing it."""

from __future__ import annotations

import pytest

from streamwal.errors import ChannelFencedError, WriteOutcome
from streamwal.wal.fence import Fence


def test_the_first_fence_wins_and_listeners_hear_it_once_in_order() -> None:
    fence = Fence("c")
    heard: list[tuple[str, str]] = []

    def broken(_error: ChannelFencedError) -> None:
        heard.append(("broken", _error.reason))
        raise RuntimeError("listener bug")

    fence.listen(broken)
    fence.listen(lambda e: heard.append(("second", e.reason)))
    fence.check()  # not fenced yet: nothing raised
    assert fence.error is None
    first = ChannelFencedError("c", "taken over by node 2")
    assert fence.set(first) is True
    assert fence.set(ChannelFencedError("c", "later")) is False
    assert fence.error is first
    assert heard == [("broken", "taken over by node 2"), ("second", "taken over by node 2")]


def test_check_raises_a_fresh_error_that_says_nothing_was_written() -> None:
    fence = Fence("c")
    landed = ChannelFencedError("c", "in flight").in_flight()
    fence.set(landed)
    with pytest.raises(ChannelFencedError) as raised:
        fence.check()
    assert raised.value is not landed
    assert raised.value.outcome is WriteOutcome.NOT_WRITTEN
    assert "in flight" in str(raised.value)
