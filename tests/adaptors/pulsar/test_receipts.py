"""Receipts put from client threads reach the loop in order, in bursts (unit, no broker)."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Callable
from typing import Any, cast

import pytest

from streamwal.adaptors.pulsar.receipts import ReceiptQueue


async def test_receipts_from_threads_are_all_handled_in_order_with_fewer_wake_ups() -> None:
    loop = asyncio.get_running_loop()
    handled: list[tuple[int, int]] = []
    wake_ups = 0
    total = 4 * 20_000
    finished = asyncio.Event()

    def handle(token: tuple[int, int], result: Any, message_id: Any) -> None:
        assert result == "ok" and message_id == token[1]
        handled.append(token)
        if len(handled) == total:
            finished.set()

    class Counting(ReceiptQueue[tuple[int, int]]):
        def _drain(self) -> None:
            nonlocal wake_ups
            wake_ups += 1
            super()._drain()

    queue = Counting(handle, loop)

    def producer(thread: int) -> None:
        for i in range(total // 4):
            queue.put((thread, i), "ok", i)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    await asyncio.wait_for(finished.wait(), 30)
    for t in threads:
        t.join()
    await asyncio.sleep(0.01)
    assert len(handled) == total
    for thread in range(4):
        assert [i for t, i in handled if t == thread] == list(range(total // 4))
    assert 0 < wake_ups < total


async def test_a_failing_handler_does_not_strand_later_receipts() -> None:
    handled: list[int] = []

    def handle(token: int, result: Any, message_id: Any) -> None:
        if token == 1:
            raise RuntimeError("a bug in one receipt's handling")
        handled.append(token)

    queue: ReceiptQueue[int] = ReceiptQueue(handle)
    for token in range(4):
        queue.put(token, None, None)
    await asyncio.sleep(0.01)
    assert handled == [0, 2, 3]


async def test_a_receipt_after_the_loop_closed_is_dropped_without_raising() -> None:
    loop = asyncio.new_event_loop()
    queue: ReceiptQueue[int] = ReceiptQueue(lambda *_: None, loop)
    loop.close()
    queue.put(1, None, None)  # a client thread must never see an exception


async def test_the_queues_of_one_loop_share_its_wake_ups(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's channels share a writer client whose I/O thread answers them
    interleaved: one receipt for each of 256 channels in turn wakes the loop a few
    times, not once per channel, and each channel's receipts stay in order."""
    loop = asyncio.get_running_loop()
    wake_ups = 0
    call_soon_threadsafe = loop.call_soon_threadsafe

    def counting(callback: Callable[..., object], *args: Any) -> asyncio.Handle:
        nonlocal wake_ups
        wake_ups += 1
        return call_soon_threadsafe(callback, *args)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    channels, rounds = 256, 4
    handled: dict[int, list[int]] = {c: [] for c in range(channels)}
    finished = asyncio.Event()

    def handler(channel: int) -> Callable[[int, Any, Any], None]:
        def handle(token: int, result: Any, message_id: Any) -> None:
            handled[channel].append(token)
            if sum(map(len, handled.values())) == channels * rounds:
                finished.set()

        return handle

    queues = [ReceiptQueue(handler(c)) for c in range(channels)]

    def io_thread() -> None:
        for i in range(rounds):
            for queue in queues:
                queue.put(i, None, None)

    thread = threading.Thread(target=io_thread)
    thread.start()
    await asyncio.wait_for(finished.wait(), 30)
    thread.join()
    assert all(tokens == list(range(rounds)) for tokens in handled.values())
    assert 0 < wake_ups <= channels // 4, wake_ups  # once per receipt (1,024) before


def test_a_closed_loop_is_not_kept_alive_by_its_queues_waker() -> None:
    """Every ``asyncio.run`` of a CLI, every test, makes a loop of its own."""
    loop = asyncio.new_event_loop()
    queue: ReceiptQueue[int] = ReceiptQueue(lambda *_: None, loop)
    queue.put(1, None, None)  # the loop never ran: the drain it asked for never comes
    gone = weakref.ref(loop)
    loop.close()
    del loop, queue
    gc.collect()
    assert gone() is None


async def test_a_handler_letting_a_cancellation_through_strands_no_other_queue() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:

        def cancelled(*_: Any) -> None:
            raise asyncio.CancelledError

        handled: list[int] = []
        first: ReceiptQueue[int] = ReceiptQueue(cancelled)
        second: ReceiptQueue[int] = ReceiptQueue(lambda token, *_: handled.append(token))
        first.put(0, None, None)
        second.put(1, None, None)  # waits behind the first in the same wake-up
        await asyncio.sleep(0.01)
    finally:
        loop.set_exception_handler(previous)
    assert handled == [1]
    assert len(reported) == 1  # the loop reported the one that escaped


class _UnreferencedLoop:
    """A loop of another kind that takes no weak reference: it can key no shared waker."""

    __slots__ = ("woken",)

    def __init__(self) -> None:
        self.woken: list[Callable[[], None]] = []

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        self.woken.append(callback)


class _UnhashableLoop(_UnreferencedLoop):
    """Another that takes a weak reference (a subclass without ``__slots__`` does) but
    has no hash: no shared waker either."""

    __hash__ = None  # type: ignore[assignment]


@pytest.mark.parametrize("kind", [_UnreferencedLoop, _UnhashableLoop])
def test_a_loop_that_cannot_key_a_shared_waker_gets_a_waker_per_queue(kind: type) -> None:
    loop = kind()
    seen: list[str] = []
    queues = [
        ReceiptQueue[str](lambda token, _r, _m: seen.append(token), loop=cast(Any, loop))
        for _ in range(2)
    ]
    queues[0].put("a", None, None)
    queues[1].put("b", None, None)
    queues[0].put("c", None, None)
    assert len(loop.woken) == 2  # one wake-up for each queue, none shared
    for drain in loop.woken:
        drain()
    assert seen == ["a", "c", "b"]
