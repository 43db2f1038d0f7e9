"""Background tasks: stopping one for sure, and the loop of rounds most of them are.

A component's ``close`` cancels the loop it started and must not return while that
loop still runs (it could touch what ``close`` releases next); the task's own
cancellation is how it ends, so it is not an error to the closer
(:func:`cancel_and_wait`).

The cluster's roles (balancing, following the plan, probing the peers) and a WAL
owner's duties (time ticks, truncation) each repeat one round every interval until
closed, and a failed round must not end the loop: the next one tries again.
:class:`RoundLoop` is that loop, written once; a component says what its round is
and what a failure is to it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["RoundLoop", "cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (``None``: nothing started) and wait until it has ended."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class RoundLoop:
    """A component whose background task runs :meth:`_round` every ``_interval`` seconds.

    A mixin: the component's ``__init__`` sets ``_interval`` among its own settings,
    and its ``start`` and ``close`` (their signatures are the component's) call
    :meth:`_start_rounds` and :meth:`_stop_rounds`. A round that fails with one of
    :attr:`_round_errors` goes to :meth:`_round_failed`, which says whether the loop
    goes on; any other failure ends the task with it.
    """

    #: seconds between rounds
    _interval: float
    #: the first round comes after one interval, not at once (the open did the work)
    _wait_first = False
    #: the failures of a round that the loop may outlive (:meth:`_round_failed` decides)
    _round_errors: tuple[type[Exception], ...] = (Exception,)
    _task: asyncio.Task[None] | None = None
    _closed = False

    def _start_rounds(self, name: str | None = None) -> asyncio.Task[None] | None:
        """Start the loop; the new task, ``None`` if it was started or closed before."""
        if self._task is not None or self._closed:
            return None
        self._task = asyncio.get_running_loop().create_task(self._rounds(), name=name)
        return self._task

    async def _stop_rounds(self) -> bool:
        """End the loop and wait until it has; ``False`` if it was stopped before."""
        if self._closed:
            return False
        self._closed = True
        task, self._task = self._task, None
        await cancel_and_wait(task)
        return True

    async def _rounds(self) -> None:
        if self._wait_first:
            await asyncio.sleep(self._interval)
        while not self._closed:
            try:
                await self._round()
            except self._round_errors as exc:
                if not self._round_failed(exc):
                    return
            await asyncio.sleep(self._interval)

    async def _round(self) -> object:
        raise NotImplementedError

    def _round_failed(self, exc: Exception) -> bool:
        """A round failed with ``exc`` (one of :attr:`_round_errors`): log it, and say
        whether the loop goes on (``False``: it ends, quietly)."""
        raise NotImplementedError
