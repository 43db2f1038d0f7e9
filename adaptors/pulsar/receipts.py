"""Send receipts from the Pulsar client's threads, handed to the event loop in bursts.

The C++ client calls a send callback on its I/O thread, once per message. Waking the
event loop once per receipt (``call_soon_threadsafe``) would cost a self-pipe write, a
loop iteration and a GIL hand-over per append (docs/performance.md, "What the design
choices save"). Receipts are queued instead, and the loop is woken only when the queue
goes from empty to non-empty: one wake-up drains every receipt that arrived meanwhile,
in the order the client produced them (one producer's receipts come in log order).

The channels of a node share its writer client, whose I/O thread answers them
interleaved: with a wake-up per channel, a node writing 256 channels was woken about
once per receipt again. So the queues of one event loop share one wake-up (a
``_Waker``): the loop is woken when the first of them gets a receipt, and drains every
queue that got one meanwhile, each in its own order.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["ReceiptQueue"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

Handler = Callable[[T, Any, Any], None]


class _Waker:
    """One wake-up of a loop for every queue on it with receipts waiting. ``loop``
    gives the loop, or ``None`` once it is gone: a shared waker holds its loop weakly,
    since the loop is the key it is kept under and a closed loop must go."""

    __slots__ = ("_loop", "_ready", "_scheduled")

    def __init__(self, loop: Callable[[], asyncio.AbstractEventLoop | None]) -> None:
        self._loop = loop
        self._ready: deque[ReceiptQueue[Any]] = deque()
        self._scheduled = False

    def wake(self, queue: ReceiptQueue[Any]) -> None:
        """``queue`` got its first receipt since it was drained (any thread)."""
        self._ready.append(queue)
        if self._scheduled:
            return
        loop = self._loop()
        if loop is None:
            return  # the loop is gone; nobody waits any more
        self._scheduled = True
        try:
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            pass  # the loop is closed; nobody waits any more

    def _drain(self) -> None:
        self._scheduled = False
        ready = self._ready
        try:
            while ready:
                ready.popleft()._drain()
        finally:
            # a handler let a BaseException through: the queues behind it still drain
            if ready and not self._scheduled:
                loop = self._loop()
                if loop is not None:
                    self._scheduled = True
                    loop.call_soon(self._drain)


_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waker] = weakref.WeakKeyDictionary()


def _waker_of(loop: asyncio.AbstractEventLoop) -> _Waker:
    """The loop's shared waker; a loop that takes no weak reference (asyncio's all do)
    gets a waker per queue, which holds it."""
    try:
        ref = weakref.ref(loop)
        waker = _wakers.get(loop)
    except TypeError:  # no weak reference, or no hash: it can key no shared waker
        return _Waker(lambda: loop)
    if waker is None:
        waker = _wakers[loop] = _Waker(ref)
    return waker


class ReceiptQueue(Generic[T]):
    """``put`` from any thread; ``handler(token, result, message_id)`` runs on the loop.

    The flags and the deques are touched under the GIL only (single attribute stores and
    ``deque`` appends/pops are atomic), so no lock is needed: a receipt put after the
    drain cleared the flag asks for a new drain; one put before is drained by it. The
    loop's waker holds the same rule for the queues it drains.
    """

    __slots__ = ("_handler", "_queued", "_scheduled", "_waker")

    def __init__(self, handler: Handler[T], loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._handler = handler
        self._waker = _waker_of(loop or asyncio.get_running_loop())
        self._queued: deque[tuple[T, Any, Any]] = deque()
        self._scheduled = False

    def put(self, token: T, result: Any, message_id: Any) -> None:
        """Called on a client thread: must never raise (it would abort the process)."""
        self._queued.append((token, result, message_id))
        if self._scheduled:
            return
        self._scheduled = True
        self._waker.wake(self)

    def _drain(self) -> None:
        self._scheduled = False
        queued, handler = self._queued, self._handler
        while queued:
            try:
                handler(*queued.popleft())
            except Exception:  # one bad receipt must not strand the ones behind it
                _log.exception("handling a send receipt failed")
