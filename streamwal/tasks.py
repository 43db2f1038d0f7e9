"""``cancel_and_wait``: stop a background task and be sure it has ended.

A component's ``close`` cancels the loop it started and must not return while that
loop still runs (it could touch what ``close`` releases next); the task's own
cancellation is how it ends, so it is not an error to the closer.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (``None``: nothing started) and wait until it has ended."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
