"""A node's part in the cluster: its session, the follower and, if enabled, a balancer.

Start: register (a duplicate live node id fails the start), then follow, then
campaign. Leave (a clean stop): ask for this node to be drained and wait, within
``wait_s``, until its channels serve elsewhere, so a rolling restart moves channels
while this node still serves them instead of after a lease TTL and a grace period;
then stop following and balancing. Close: revoke the lease, which also ends a balancer
term it held. The node closes the channels a drain could not move between the two.
Revoking first gave those channels to other nodes at once (their old owner gone), and
their fences met this node's closing producers: the broker deadlock in
docs/reliability.md, "Known limits". While the record lives, a channel moved from this
node waits for its release or the grace period, as any move does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from streamwal.cluster.balancer import Balancer
from streamwal.cluster.channel_records import ClusterChannelRecords
from streamwal.cluster.follower import Follower
from streamwal.cluster.liveness import Prober
from streamwal.cluster.membership import Session
from streamwal.cluster.records import ClusterKeys, Drain, NodeRecord, encode, now_ms
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import ClosedError, UnavailableError
from streamwal.node.channels import ChannelManager
from streamwal.node.cluster_settings import ClusterSettings

__all__ = ["ClusterMember"]

_log = logging.getLogger(__name__)


class ClusterMember:
    def __init__(
        self,
        settings: ClusterSettings,
        store: ClusterStore,
        *,
        node_id: int,
        address: str,
        version: str,
        channels: ChannelManager,
        not_ready: str = "",
        on_node_lost: Callable[[NodeRecord], Awaitable[None]] | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._keys = ClusterKeys(settings.key_prefix)
        record = NodeRecord(node_id, address, version, now_ms(), not not_ready, not_ready)
        self._session = Session(store, self._keys, record, settings.lease_ttl_s)
        self._follower = Follower(
            store,
            self._keys,
            node_id,
            channels,
            interval_s=settings.poll_interval_s,
            grace_s=settings.grace_period_s,
        )
        self._prober = Prober(
            store,
            self._keys,
            node_id,
            lambda: self._follower.last_view,
            interval_s=settings.probe_interval_s,
            refusals=settings.probe_refusals,
            on_lost=on_node_lost,
        )
        # the cluster places this node's channels: a direct AssignChannel would fence
        # the owner behind the balancer's back (and be taken back on the next write)
        channels.place_by(
            "this node is a cluster member; the cluster places its channels: "
            "use `streamwal cluster move CHANNEL --to NODE`"
        )
        self._balancer: Balancer | None = None
        if settings.balancer:
            self._balancer = Balancer(
                store,
                self._keys,
                self._session,
                seed_channels=settings.channels,
                grace_s=settings.grace_period_s,
                max_moves=settings.max_moves_per_round,
                interval_s=settings.round_interval_s,
                open_failure_bound_s=settings.open_failure_bound_s,
                lease_ttl_s=settings.lease_ttl_s,
            )
        self._left = False
        self._closed = False

    @property
    def latest_view(self) -> ClusterView | None:
        """The follower's last reading of the cluster (``None`` before the first)."""
        return self._follower.last_view

    def channel_records(self) -> ClusterChannelRecords:
        """The cluster's keys of a channel, for a node's ``DeleteChannel``."""
        return ClusterChannelRecords(self._store, self._keys)

    @property
    def balancer_term(self) -> int:
        return self._balancer.term if self._balancer is not None else 0

    async def start(self) -> None:
        await self._store.start()
        await self._session.start()
        await self._follower.start()
        await self._prober.start()
        if self._balancer is not None:
            await self._balancer.start()

    async def set_ready(self, ready: bool, why: str = "") -> None:
        """Say in the node's record whether it can take channels (and why not): the
        balancer gives channels to ready nodes only."""
        record = replace(self._session.record, ready=ready, not_ready="" if ready else why)
        if self._session.published == record:
            return  # etcd has it already (a put that failed is tried again)
        await self._session.update(record)

    async def leave(self, wait_s: float) -> None:
        """Drain this node and stop taking part, within ``wait_s`` in all; the lease
        (and the node's record) stays until :meth:`close`."""
        if self._closed or self._left:
            return
        deadline = time.monotonic() + wait_s
        if self._session.lease_id is not None:  # registered, and the lease still lives
            try:
                await self._drain_self(wait_s)
            except (UnavailableError, ClosedError) as exc:
                _log.warning("cluster: leaving without a drain: %s", exc)
        await self._stop_taking_part(max(0.0, deadline - time.monotonic()))

    async def _stop_taking_part(self, let_go_s: float = 0.0) -> None:
        if self._left:
            return
        self._left = True
        await self._prober.close()
        if self._balancer is not None:
            await self._balancer.close()
        await self._follower.close(let_go_s)

    async def _drain_self(self, wait_s: float) -> None:
        record = self._session.record
        await self._store.put(
            self._keys.drain + str(record.id),
            encode(Drain(record.id, record.started_at_ms)),
            timeout=min(wait_s, 2.0),
        )
        deadline = time.monotonic() + wait_s
        held: set[str] | None = None
        while time.monotonic() < deadline:
            view = await read_view(self._store, self._keys)
            if len(view.nodes) < 2:
                return  # nowhere to move to
            left = {c for c, a in view.assignments.items() if a.node == record.id}
            held = left if held is None else held | left
            if not left and all(view.serving(c) for c in held if c in view.assignments):
                _log.info("cluster: node %d drained", record.id)
                return
            await asyncio.sleep(self._settings.poll_interval_s)
        _log.warning("cluster: node %d not drained within %.1fs; leaving anyway", record.id, wait_s)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._stop_taking_part()
        await self._session.close()
        with contextlib.suppress(UnavailableError, ClosedError):
            await self._store.delete(self._keys.drain + str(self._session.record.id), timeout=1.0)
        await self._store.close()
