"""``within``: one step of a read bounded in time, inside a bound of its own.

On Python 3.11, ``asyncio.wait_for`` runs its awaitable as a task of its own and,
when its caller is cancelled in the same loop iteration as that task finishes,
returns the result and drops the cancellation (fixed in 3.12, where ``wait_for`` is
built on ``asyncio.timeout``). A loop of ``wait_for`` steps inside an
``asyncio.timeout`` then loses that timeout's cancellation: the loop goes on as if
no deadline had passed. A read that chases a log another owner keeps writing went
on for the whole send timeout that way instead of its operation timeout.
``asyncio.timeout`` cancels the caller's own task, whose cancellation is never lost,
and makes no task per step.

Cleanup code uses ``within`` too (``closing.close_quietly`` after its task was
cancelled). Before Python 3.11.3, ``asyncio.timeout`` entered in a task already being
cancelled did not know its own expiry (gh-102780): it let the step's timeout out as a
``CancelledError``, past the cleanup's ``TimeoutError`` handling. Hence
``requires-python`` 3.11.3.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["within"]

_T = TypeVar("_T")


async def within(step: Awaitable[_T], timeout: float | None) -> _T:
    """``await step``, :class:`TimeoutError` after ``timeout`` seconds (the step is
    cancelled); ``None``: no bound. In place of ``asyncio.wait_for(step, timeout)``."""
    async with asyncio.timeout(timeout):
        return await step
