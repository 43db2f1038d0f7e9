"""A node follows the plan: it opens what is assigned to it and closes what moved away.

It reads the cluster prefix every ``poll_interval_s`` rather than watching it: a read
is one consistent view of assignments and statuses, it needs no resume logic after
an etcd restart or compaction, and at a fifth of a second it adds little to a
failover measured in lease TTLs. When etcd does not answer, nothing changes here: the
node keeps serving what it has until the broker fences it (docs/deploy.md).

Each open reports ``opening``, then ``serving`` or ``failed`` (with the error) to
``status/<channel>``; a failed open is tried again after a pause. The reports carry
since when (and how often) the opens of this assignment fail, so the balancer can
move a channel this node cannot open (:mod:`.placement`). Opening runs
inside the trace context the balancer wrote, so ``wal.open`` joins its decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from opentelemetry import context as otel_context
from opentelemetry import propagate

from streamwal.cluster.metrics import record_failover
from streamwal.cluster.records import Assignment, ChannelStatus, ClusterKeys, encode, now_ms
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import ChannelNotFoundError, ClosedError, StreamwalError, UnavailableError
from streamwal.node.channels import ChannelManager

__all__ = ["Follower"]

_log = logging.getLogger(__name__)
_RETRY_FAILED_S = 1.0


class Follower:
    def __init__(
        self,
        store: ClusterStore,
        keys: ClusterKeys,
        node_id: int,
        channels: ChannelManager,
        *,
        interval_s: float,
    ) -> None:
        self._store = store
        self._keys = keys
        self._node_id = node_id
        self._channels = channels
        self._interval = interval_s
        #: channels this node opened because the plan said so, by assignment revision
        self._followed: dict[str, int] = {}
        self._opening: dict[str, asyncio.Task[None]] = {}
        self._reported: dict[str, tuple[str, int, int]] = {}
        #: per channel: (assignment revision, first failure ms, failures) while failing
        self._failing: dict[str, tuple[int, int, int]] = {}
        self._last_error: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.last_view: ClusterView | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="cluster-follower")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [t for t in (self._task, *self._opening.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while not self._closed:
            try:
                await self._step()
            except UnavailableError as exc:
                _log.debug("cluster: assignments not read (keeps serving): %s", exc)
            except ClosedError:
                return
            except Exception:
                _log.exception("cluster: following the plan failed")
            await asyncio.sleep(self._interval)

    async def _step(self) -> None:
        view = self.last_view = await read_view(self._store, self._keys)
        mine = {c: a for c, a in view.assignments.items() if a.node == self._node_id}
        open_here = {w.channel: w for w in self._channels.channels()}
        for channel, assignment in mine.items():
            revision = view.assignment_revisions[channel]
            if channel in self._opening:
                continue
            wal = open_here.get(channel)
            if wal is not None and not wal.is_fenced:
                self._followed[channel] = revision
                await self._report(channel, "serving", "", revision)
                continue
            self._opening[channel] = asyncio.create_task(
                self._open(assignment, revision), name=f"cluster-open-{channel}"
            )
        # an open still running counts too: finishing it would fence the new owner
        for channel in set(self._followed) | set(self._opening):
            if channel in mine:
                continue
            self._followed.pop(channel, None)
            task = self._opening.pop(channel, None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, StreamwalError):
                    await task
            with contextlib.suppress(ChannelNotFoundError):
                await self._channels.remove(channel)
            self._reported.pop(channel, None)
            self._failing.pop(channel, None)
            _log.info("cluster: channel %s moved away from node %d; closed", channel, self._node_id)

    async def _open(self, assignment: Assignment, revision: int) -> None:
        channel = assignment.channel
        token = otel_context.attach(propagate.extract(assignment.trace))
        try:
            await self._open_and_report(assignment, revision)
        except UnavailableError as exc:  # the status is written again on the next step
            _log.warning("cluster: status of %s not written: %s", channel, exc)
        finally:
            otel_context.detach(token)
            self._opening.pop(channel, None)

    async def _open_and_report(self, assignment: Assignment, revision: int) -> None:
        channel = assignment.channel
        failing = self._failing.get(channel)
        # a retry keeps the last error in view: "opening" alone would hide why
        last = self._last_error.get(channel, "") if failing and failing[0] == revision else ""
        await self._report(channel, "opening", last, revision)
        try:
            await self._channels.assign(channel)
        except (StreamwalError, OSError) as exc:
            _log.warning("cluster: opening %s failed: %s", channel, exc)
            held = self._failing.get(channel)
            since, failures = (now_ms(), 0) if held is None or held[0] != revision else held[1:]
            self._failing[channel] = (revision, since, failures + 1)
            error = self._last_error[channel] = f"{type(exc).__name__}: {exc}"
            await self._report(channel, "failed", error, revision)
            await asyncio.sleep(_RETRY_FAILED_S)
            return
        self._failing.pop(channel, None)
        self._followed[channel] = revision
        await self._report(channel, "serving", "", revision)
        if assignment.lost_at_ms is not None:
            record_failover((now_ms() - assignment.lost_at_ms) / 1000, channel)

    async def _report(self, channel: str, state: str, reason: str, revision: int) -> None:
        failing = self._failing.get(channel)
        since, failures = (None, 0) if failing is None or failing[0] != revision else failing[1:]
        if self._reported.get(channel) == (state, revision, failures):
            return
        status = ChannelStatus(
            channel, self._node_id, state, reason, now_ms(), revision, since, failures
        )
        await self._store.put(self._keys.status + channel, encode(status))
        self._reported[channel] = (state, revision, failures)
