"""Send receipts from the Pulsar client's threads, handed to the event loop in bursts.

The C++ client calls a send callback on its I/O thread, once per message. Waking the
event loop once per receipt (``call_soon_threadsafe``) would cost a self-pipe write, a
loop iteration and a GIL hand-over per append (docs/performance.md, "What the design
choices save"). Receipts are queued instead, and the loop is woken only when the queue
goes from empty to non-empty: one wake-up drains every receipt that arrived meanwhile,
in the order the client produced them (one producer's receipts come in log order).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["ReceiptQueue"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

Handler = Callable[[T, Any, Any], None]


class ReceiptQueue(Generic[T]):
    """``put`` from any thread; ``handler(token, result, message_id)`` runs on the loop.

    The flag and the deque are touched under the GIL only (single attribute stores and
    ``deque`` appends/pops are atomic), so no lock is needed: a receipt put after the
    drain cleared the flag schedules a new drain; one put before is drained by it.
    """

    __slots__ = ("_handler", "_loop", "_queued", "_scheduled")

    def __init__(self, handler: Handler[T], loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._handler = handler
        self._loop = loop or asyncio.get_running_loop()
        self._queued: deque[tuple[T, Any, Any]] = deque()
        self._scheduled = False

    def put(self, token: T, result: Any, message_id: Any) -> None:
        """Called on a client thread: must never raise (it would abort the process)."""
        self._queued.append((token, result, message_id))
        if self._scheduled:
            return
        self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            pass  # the loop is closed; nobody waits any more

    def _drain(self) -> None:
        self._scheduled = False
        queued, handler = self._queued, self._handler
        while queued:
            try:
                handler(*queued.popleft())
            except Exception:  # one bad receipt must not strand the ones behind it
                _log.exception("handling a send receipt failed")
