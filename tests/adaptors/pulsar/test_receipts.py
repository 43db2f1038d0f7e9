"""Receipts put from client threads reach the loop in order, in bursts (unit, no broker)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

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
