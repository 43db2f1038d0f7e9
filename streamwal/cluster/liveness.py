"""Finding a killed node before its lease runs out: its gRPC port refuses.

A lease tells a dead node from a live one only after its TTL, and the TTL cannot be
short: a node paused for a few seconds (a long GC, a stalled disk, SIGSTOP) must keep
its channels, or every hiccup becomes a failover. A killed process leaves better
evidence at once: the kernel closes its listening socket, so a connection to its
address is refused (RST), while a paused or partitioned process keeps its socket (the
kernel still completes the handshake, or the packets are lost: a time-out, never a
refusal). So every cluster member connects to each other registered node's advertised
address every ``probe_interval_s``; ``probe_refusals`` refusals in a row, of the same
start of that node, is death. The member that sees it writes ``lost/<id>``
(:class:`~streamwal.cluster.records.Lost`), guarded by the node's record being the one
it probed, and revokes the node's lease: everyone now sees the node gone, and the
balancer moves its channels without the grace period (the grace is for a node that may
come back; this one cannot). Every member probes, not only the balancer: the dead node
may be the balancer.

Not probed: a node draining itself (a clean stop drains before it stops listening, and
then gives up its lease on its own once its channels are closed). A firewall that
answers with a reset looks like a refusal: run the nodes where their peers reach them
directly, or set ``cluster.probe_refusals: 0`` to rely on the lease alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from opentelemetry import propagate, trace

from streamwal.cluster.metrics import record_node_lost
from streamwal.cluster.records import ClusterKeys, Lost, NodeRecord, encode, now_ms
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView
from streamwal.errors import ClosedError, UnavailableError
from streamwal.tasks import RoundLoop

__all__ = ["Probe", "Prober", "probe"]

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

_REFUSED = {errno.ECONNREFUSED}


def _context_of_current_span() -> dict[str, str]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


class Probe:
    """What one connection attempt says of a node."""

    OK = "ok"  # something listens there
    REFUSED = "refused"  # nothing listens there: the process is gone
    UNKNOWN = "unknown"  # no answer in time, no route, ...: says nothing


async def probe(address: str, timeout: float) -> str:
    """Connect to ``address`` (``host:port``, ``[v6]:port``) and close at once."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
    except ConnectionRefusedError:
        return Probe.REFUSED
    except OSError as exc:
        return Probe.REFUSED if exc.errno in _REFUSED else Probe.UNKNOWN
    except (TimeoutError, ValueError):
        return Probe.UNKNOWN
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return Probe.OK


@dataclass
class _Refusals:
    started_at_ms: int
    first_ms: int
    count: int = 0


class Prober(RoundLoop):
    """``start()`` / ``close()``; probes the nodes of the latest view ``view_source``
    gives (the follower's: no extra etcd reads)."""

    def __init__(
        self,
        store: ClusterStore,
        keys: ClusterKeys,
        node_id: int,
        view_source: Callable[[], ClusterView | None],
        *,
        interval_s: float,
        refusals: int,
        timeout_s: float = 0.5,
        on_lost: Callable[[NodeRecord], Awaitable[None]] | None = None,
    ) -> None:
        """``on_lost``: called after this node declared a node lost (the node's part in
        other elections, such as the TSO's, can end at once too); what it raises is
        logged."""
        self._store = store
        self._keys = keys
        self._node_id = node_id
        self._view_source = view_source
        self._interval = interval_s
        self._needed = refusals
        self._timeout = min(timeout_s, interval_s * 2)
        self._refusals: dict[int, _Refusals] = {}
        self._on_lost = on_lost

    async def start(self) -> None:
        if self._needed > 0:
            self._start_rounds("cluster-prober")

    async def close(self) -> None:
        await self._stop_rounds()

    async def _round(self) -> None:
        await self.round()

    def _round_failed(self, exc: Exception) -> bool:
        _log.error("cluster: probe round failed", exc_info=exc)
        return True

    async def round(self) -> None:
        """Probe every other live node once; declare those whose refusals add up."""
        view = self._view_source()
        if view is None:
            return
        draining = view.draining()
        targets = {
            node: record
            for node, record in view.nodes.items()
            if node != self._node_id and node not in draining and node not in view.lost
        }
        for node in list(self._refusals):
            if node not in targets:
                del self._refusals[node]
        if not targets:
            return
        answers = await asyncio.gather(
            *(probe(record.address, self._timeout) for record in targets.values())
        )
        at = now_ms()
        for (node, record), answer in zip(targets.items(), answers, strict=True):
            seen = self._refusals.get(node)
            if answer != Probe.REFUSED:
                if answer == Probe.OK:
                    self._refusals.pop(node, None)
                continue  # a time-out neither adds to nor clears the count
            if seen is None or seen.started_at_ms != record.started_at_ms:
                seen = self._refusals[node] = _Refusals(record.started_at_ms, at)
            seen.count += 1
            if seen.count >= self._needed:
                del self._refusals[node]
                await self._declare(view, node, seen, at)

    async def _declare(self, view: ClusterView, node: int, seen: _Refusals, at: int) -> None:
        lease = view.node_leases.get(node, 0)
        revision = view.node_revisions.get(node, 0)
        attributes: dict[str, str | int] = {
            "streamwal.cluster.node": node,
            "streamwal.cluster.evidence": "connection-refused",
            "streamwal.cluster.refusals": seen.count,
            "streamwal.cluster.first_refused_ms": seen.first_ms,
            "streamwal.cluster.by": self._node_id,
        }
        with _tracer.start_as_current_span("cluster.node_lost", attributes=attributes) as span:
            last_renewal: int | None = None
            try:
                ttl = (await self._store.lease_ttls([lease], timeout=1.0)).get(lease)
                if ttl is not None:
                    last_renewal = at - (ttl.granted_s - ttl.remaining_s) * 1000
                    span.set_attribute("streamwal.cluster.last_renewal_ms", last_renewal)
                lost = Lost(
                    node,
                    seen.started_at_ms,
                    lease,
                    "connection-refused",
                    seen.first_ms,
                    seen.count,
                    at,
                    self._node_id,
                    last_renewal,
                    _context_of_current_span(),
                )
                written = await self._store.declare_lost(
                    self._keys.node(node),
                    revision,
                    self._keys.lost + str(node),
                    encode(lost),
                    lease,
                    timeout=1.0,
                )
            except (UnavailableError, ClosedError) as exc:
                _log.warning("cluster: node %d refuses connections; not declared: %s", node, exc)
                span.set_attribute("streamwal.cluster.written", False)
                return
            span.set_attribute("streamwal.cluster.written", written)
        if written and self._on_lost is not None:
            try:
                await self._on_lost(view.nodes[node])
            except Exception:
                _log.exception("cluster: after declaring node %d lost", node)
        if written:
            record_node_lost("connection-refused")
            _log.warning(
                "cluster: node %d declared lost: %d refused connections to %s since %d ms "
                "ago; its lease is revoked",
                node,
                seen.count,
                view.nodes[node].address,
                at - seen.first_ms,
            )
