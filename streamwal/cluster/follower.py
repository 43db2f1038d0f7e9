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
inside the trace context the balancer wrote, so ``wal.open`` joins its decision; a
failover's trace ends here, at the channel's first acknowledged write
(:mod:`.failover`).

A channel moved from a live node is opened only once that node has closed it and
said so (``released/<channel>``), or after ``grace_s`` without a word, or once it is
gone or not ready. A fence that meets the old owner's close of its producer at the
broker can deadlock the broker's I/O threads (docs/reliability.md); the fence
alone keeps the log safe, this keeps the broker up. The old owner writes its release
once the channel is closed here, and for a channel that moved away from it that it
never held (it restarted, or never opened it), so the new owner need not wait; a node
still waiting for its own predecessor when the channel moves on releases once that
wait ends, so a chain of quick moves keeps the order. Each channel that moved away
is closed in a task of its own: neither a drain's last release nor the node's other
channels wait for a slow close.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import dataclass

from opentelemetry import context as otel_context
from opentelemetry import propagate

from streamwal.cluster.failover import emit_failover_end
from streamwal.cluster.metrics import record_reassignment, record_release_wait
from streamwal.cluster.records import (
    Assignment,
    ChannelStatus,
    ClusterKeys,
    Release,
    encode,
    now_ms,
)
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import ChannelNotFoundError, ClosedError, StreamwalError, UnavailableError
from streamwal.node.channels import ChannelManager
from streamwal.tasks import RoundLoop
from streamwal.wal.wal import WAL

__all__ = ["Follower"]

_log = logging.getLogger(__name__)
_RETRY_FAILED_S = 1.0


@dataclass(frozen=True)
class _Wait:
    """This node awaits ``previous``'s release of the assignment at ``revision``."""

    revision: int
    previous: int
    since: float


class Follower(RoundLoop):
    def __init__(
        self,
        store: ClusterStore,
        keys: ClusterKeys,
        node_id: int,
        channels: ChannelManager,
        *,
        interval_s: float,
        grace_s: float,
    ) -> None:
        self._store = store
        self._keys = keys
        self._node_id = node_id
        self._channels = channels
        self._interval = interval_s
        self._grace = grace_s
        #: per channel moved here from a live node whose release this node awaits; kept
        #: if the channel moves on meanwhile, as this node's own release waits for it
        self._awaiting: dict[str, _Wait] = {}
        #: per channel: the assignment revision whose release wait is over
        self._cleared: dict[str, int] = {}
        #: channels this node opened because the plan said so, by assignment revision
        self._followed: dict[str, int] = {}
        self._opening: dict[str, asyncio.Task[None]] = {}
        #: channels that moved away, being closed here (then released)
        self._letting_go: dict[str, asyncio.Task[None]] = {}
        #: failovers onto this node awaiting their channel's first acknowledged write
        self._failovers: set[asyncio.Task[None]] = set()
        self._reported: dict[str, tuple[str, int, int]] = {}
        #: per channel: (assignment revision, first failure ms, failures) while failing
        self._failing: dict[str, tuple[int, int, int]] = {}
        self._last_error: dict[str, str] = {}
        self.last_view: ClusterView | None = None

    async def start(self) -> None:
        self._start_rounds("cluster-follower")

    async def close(self, let_go_s: float = 0.0) -> None:
        """Stop following. Channels still being let go of get up to ``let_go_s`` to
        close and write their releases (a clean leave: their new owners then need not
        wait out the grace); whatever is left after that is cancelled."""
        if not await self._stop_rounds():  # no round starts another open or let-go now
            return
        letting_go = [t for t in self._letting_go.values() if not t.done()]
        if letting_go and let_go_s > 0:
            await asyncio.wait(letting_go, timeout=let_go_s)
        tasks = [*self._opening.values(), *self._letting_go.values(), *self._failovers]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _round_failed(self, exc: Exception) -> bool:
        if isinstance(exc, ClosedError):
            return False
        if isinstance(exc, UnavailableError):
            _log.debug("cluster: assignments not read (keeps serving): %s", exc)
        else:
            _log.error("cluster: following the plan failed", exc_info=exc)
        return True

    async def _round(self) -> None:
        view = self.last_view = await read_view(self._store, self._keys)
        mine = {c: a for c, a in view.assignments.items() if a.node == self._node_id}
        open_here = {w.channel: w for w in self._channels.channels()}
        for channel, assignment in mine.items():
            revision = view.assignment_revisions[channel]
            if channel in self._opening or channel in self._letting_go:
                continue  # an open runs, or the channel came back while closing here
            wal = open_here.get(channel)
            if wal is not None and not wal.is_fenced:
                self._followed[channel] = revision
                await self._report(channel, "serving", "", revision)
                continue
            if not self._may_fence(view, assignment, revision):
                continue
            self._opening[channel] = asyncio.create_task(
                self._open(assignment, revision), name=f"cluster-open-{channel}"
            )
        for channel in [c for c in self._cleared if c not in mine]:
            del self._cleared[channel]
        # an open still running counts too: finishing it would fence the new owner. Each
        # channel is closed in a task of its own, so neither a drain's last release nor
        # this node's other channels wait for a slow close
        for channel in [c for c in set(self._followed) | set(self._opening) if c not in mine]:
            self._followed.pop(channel, None)
            self._reported.pop(channel, None)
            self._failing.pop(channel, None)
            task = asyncio.create_task(
                self._let_go(view, channel, self._opening.pop(channel, None)),
                name=f"cluster-let-go-{channel}",
            )
            self._letting_go[channel] = task
            task.add_done_callback(functools.partial(self._let_go_done, channel))
        # a wait for an earlier owner that outlived this node's assignment: this
        # node's own release follows it (the owner after this one waits for that)
        for channel, wait in list(self._awaiting.items()):
            if channel in mine:
                continue
            if channel not in view.assignments or self._wait_over(view, channel, wait):
                del self._awaiting[channel]
        # what moved away from here without being held here (a restart, an open that
        # never began) is released too, so its new owner does not wait it out
        for channel in view.assignments:
            if channel not in self._letting_go and self._owes_release(view, channel):
                await self._release(channel)

    async def _let_go(
        self, view: ClusterView, channel: str, opening: asyncio.Task[None] | None
    ) -> None:
        """Close a channel that moved away (or its open), then say so if owed."""
        if opening is not None:
            opening.cancel()
            with contextlib.suppress(asyncio.CancelledError, StreamwalError):
                await opening
        with contextlib.suppress(ChannelNotFoundError):
            await self._channels.remove(channel)
        _log.info("cluster: channel %s moved away from node %d; closed", channel, self._node_id)
        if self._owes_release(view, channel):
            await self._release(channel)

    def _let_go_done(self, channel: str, task: asyncio.Task[None]) -> None:
        if self._letting_go.get(channel) is task:
            del self._letting_go[channel]
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, UnavailableError):  # its release is written on a later step
            _log.debug("cluster: release of %s not written: %s", channel, exc)
        elif exc is not None:
            _log.warning("cluster: letting go of %s failed: %r", channel, exc)

    def _owes_release(self, view: ClusterView, channel: str) -> bool:
        assignment = view.assignments.get(channel)
        return (
            assignment is not None
            and assignment.previous == self._node_id
            and assignment.node != self._node_id
            and channel not in self._followed
            and channel not in self._opening
            and channel not in self._awaiting
            and not view.released(channel)
            and not any(w.channel == channel for w in self._channels.channels())
        )

    async def _release(self, channel: str) -> None:
        release = Release(channel, self._node_id, now_ms())
        await self._store.put(self._keys.released + channel, encode(release))

    def _wait_over(self, view: ClusterView, channel: str, wait: _Wait) -> str | None:
        """What ended the wait for ``wait.previous``'s release, or ``None``: not over."""
        old_owner = view.nodes.get(wait.previous)
        if old_owner is None:
            return "previous_gone"
        if not old_owner.ready:  # it cannot reach the broker to close anything there
            return "previous_not_ready"
        if view.released_by(channel, wait.previous, wait.revision):
            return "released"
        if time.monotonic() - wait.since >= self._grace:
            return "timed_out"
        return None

    def _may_fence(self, view: ClusterView, assignment: Assignment, revision: int) -> bool:
        """Whether this node may open (fence) a channel moved here: see the module."""
        channel, previous = assignment.channel, assignment.previous
        if previous is None or previous == self._node_id or self._cleared.get(channel) == revision:
            return True
        wait = self._awaiting.get(channel)
        if wait is None or wait.revision != revision:
            wait = self._awaiting[channel] = _Wait(revision, previous, time.monotonic())
        outcome = self._wait_over(view, channel, wait)
        if outcome is None:
            return False
        if outcome == "timed_out" and self._grace > 0:
            _log.warning(
                "cluster: node %d has not released channel %s within %.1fs; taking it over",
                previous,
                channel,
                self._grace,
            )
        del self._awaiting[channel]
        self._cleared[channel] = revision
        record_release_wait(time.monotonic() - wait.since, outcome)
        return True

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
            opened = await self._channels.assign(channel, assignment.channel_term or None)
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
        serving_ns = time.time_ns()
        await self._report(channel, "serving", "", revision)
        if assignment.lost_at_ms is not None:
            record_reassignment((now_ms() - assignment.lost_at_ms) / 1000, channel)
        if assignment.failover:
            task = asyncio.create_task(
                self._end_failover(assignment, opened.wal, serving_ns),
                name=f"cluster-failover-{channel}",
            )
            self._failovers.add(task)
            task.add_done_callback(self._failovers.discard)

    async def _end_failover(self, assignment: Assignment, wal: WAL, serving_ns: int) -> None:
        """The failover's trace ends at the channel's first acknowledged write here."""
        acknowledged = await wal.first_acknowledged()
        if acknowledged is not None:
            emit_failover_end(assignment, self._node_id, serving_ns, acknowledged)

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
