"""One trace per failover of a channel: from its owner's last sign of life to the first
write its new owner acknowledged.

The outage of a channel whose owner died spans three nodes and several seconds: the
evidence (refused connections, or a lease running out), the waits, the balancer's
decision, the fence and open on the new owner, and the first acknowledged write. The
balancer allocates the failover's trace when it moves the channel for ``node-lost``:
a trace id and the span id of its root, ``cluster.failover``, written in the
assignment (:attr:`~streamwal.cluster.records.Assignment.failover`). The parts that
happened before the decision are emitted then, with the times they happened
(``cluster.evidence``, ``cluster.wait.lease``, ``cluster.wait.grace``); the move itself
(``cluster.move``, with the new owner's ``wal.open`` and its attempts under it) is a
child of the root. The new owner emits ``cluster.first_write`` and the root once the
channel's first append is acknowledged: only then is the outage's end known, and a
span is exported only once ended. One trace per channel, not per dead node: each
channel's outage ends at its own first write.

The root starts at the last lease renewal the cluster saw of the old owner (etcd counts
lease time in whole seconds: ``streamwal.cluster.last_renewal_precision_ms``). For a
lease that expired without other evidence, the balancer knows only when it saw the node
gone: the renewal was one TTL before the expiry, known to the balancer's round interval
and etcd's second. A balancer elected after the node died saw it gone only from its
first round on, so such a failover starts later than it did (the dead node was the
balancer, say, and gave no other evidence).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from streamwal.cluster.records import Assignment, Lost
from streamwal.node.tracing import emit_span_with_id

__all__ = [
    "FAILOVER_SPAN",
    "FailoverStart",
    "emit_failover_end",
    "emit_failover_start",
    "failover_context",
    "new_failover",
]

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
_W3C = TraceContextTextMapPropagator()

FAILOVER_SPAN = "cluster.failover"
#: etcd tells a lease's time in whole seconds
ETCD_LEASE_PRECISION_MS = 1000


def new_failover() -> dict[str, str]:
    """A W3C carrier naming a new trace and its root span (sampled: a failover is kept
    whatever the ratio, like every lifecycle span)."""
    trace_id = random.getrandbits(128) or 1
    span_id = random.getrandbits(64) or 1
    return {"traceparent": f"00-{trace_id:032x}-{span_id:016x}-01"}


def failover_context(carrier: dict[str, str]) -> Context | None:
    """The context whose spans are children of the failover's root; ``None`` for none."""
    if not carrier:
        return None
    context = _W3C.extract(carrier)
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


@dataclass(frozen=True)
class FailoverStart:
    """What the balancer knows of a failover when it decides the move."""

    #: when the old owner was last known alive, and how precisely (ms)
    last_alive_ms: int
    precision_ms: int
    evidence: str
    lost: Lost | None
    #: a lease expiry: when the balancer saw the node gone
    absent_since_ms: int | None
    ttl_ms: int

    @classmethod
    def of(
        cls, lost: Lost | None, absent_since_ms: int | None, ttl_ms: int, round_ms: int
    ) -> FailoverStart:
        """From the evidence (``lost``) or, without it, when the balancer saw the node's
        lease gone (``absent_since_ms``)."""
        if lost is not None:
            renewal = lost.last_renewal_ms
            precision = ETCD_LEASE_PRECISION_MS
            if renewal is None:  # etcd had forgotten the lease: alive at most a TTL earlier
                renewal, precision = lost.first_refused_ms - ttl_ms, ttl_ms
            evidence = f"{lost.evidence} x{lost.refusals} (seen by node {lost.by})"
            return cls(
                last_alive_ms=renewal,
                precision_ms=precision,
                evidence=evidence,
                lost=lost,
                absent_since_ms=None,
                ttl_ms=ttl_ms,
            )
        seen = absent_since_ms if absent_since_ms is not None else time.time_ns() // 1_000_000
        return cls(
            last_alive_ms=seen - ttl_ms,
            precision_ms=ETCD_LEASE_PRECISION_MS + round_ms,
            evidence="lease-expired",
            lost=None,
            absent_since_ms=seen,
            ttl_ms=ttl_ms,
        )


def _part(
    context: Context,
    name: str,
    start_ms: int,
    end_ms: int,
    attributes: dict[str, AttributeValue],
    links: list[Link] | None = None,
) -> None:
    span = _tracer.start_span(
        name, context=context, attributes=attributes, start_time=start_ms * 1_000_000, links=links
    )
    span.end(end_time=max(end_ms, start_ms) * 1_000_000)


def _links_to(carrier: dict[str, str], why: str) -> list[Link]:
    found = trace.get_current_span(_W3C.extract(carrier)).get_span_context()
    return [Link(found, {"streamwal.link": why})] if found.is_valid else []


def emit_failover_start(
    carrier: dict[str, str], start: FailoverStart, node: int, decided_ms: int
) -> None:
    """The parts before the move (see the module docstring); never raises."""
    context = failover_context(carrier)
    if context is None:
        return
    try:
        base: dict[str, AttributeValue] = {"streamwal.cluster.node": node}
        lost = start.lost
        if lost is not None:
            _part(
                context,
                "cluster.evidence",
                lost.first_refused_ms,
                lost.declared_ms,
                {
                    **base,
                    "streamwal.cluster.evidence": lost.evidence,
                    "streamwal.cluster.refusals": lost.refusals,
                    "streamwal.cluster.by": lost.by,
                },
                _links_to(lost.trace, "the declaration: its probes' account"),
            )
            return
        seen = start.absent_since_ms if start.absent_since_ms is not None else decided_ms
        _part(
            context,
            "cluster.wait.lease",
            start.last_alive_ms,
            seen,
            {**base, "streamwal.cluster.lease_ttl_ms": start.ttl_ms},
        )
        _part(
            context,
            "cluster.evidence",
            seen,
            seen,
            {**base, "streamwal.cluster.evidence": "lease-expired"},
        )
        _part(context, "cluster.wait.grace", seen, decided_ms, base)
    except Exception:
        _log.warning("cluster: failover spans of node %d not emitted", node, exc_info=True)


def emit_failover_end(
    assignment: Assignment, node_id: int, serving_ns: int, acknowledged_ns: int
) -> bool:
    """``cluster.first_write`` and the root ``cluster.failover`` of a moved channel's
    first acknowledged append on this node (its new owner); never raises."""
    context = failover_context(assignment.failover)
    if context is None or assignment.last_alive_ms is None:
        return False
    try:
        root = trace.get_current_span(context).get_span_context()
        span = _tracer.start_span(
            "cluster.first_write",
            context=context,
            attributes={"streamwal.channel": assignment.channel, "streamwal.node.id": node_id},
            start_time=serving_ns,
        )
        span.end(end_time=max(acknowledged_ns, serving_ns))
        start_ns = assignment.last_alive_ms * 1_000_000
        attributes: dict[str, AttributeValue] = {
            "streamwal.channel": assignment.channel,
            "streamwal.cluster.reason": assignment.reason,
            "streamwal.cluster.from": -1 if assignment.previous is None else assignment.previous,
            "streamwal.cluster.to": assignment.node,
            "streamwal.cluster.term": assignment.term,
            "streamwal.cluster.evidence": assignment.evidence,
            "streamwal.cluster.outage_ms": max(0, acknowledged_ns - start_ns) // 1_000_000,
            "streamwal.cluster.last_renewal_ms": assignment.last_alive_ms,
            "streamwal.cluster.last_renewal_precision_ms": assignment.last_alive_precision_ms,
            "streamwal.node.id": node_id,
        }
        own = SpanContext(
            root.trace_id, root.span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        )
        return emit_span_with_id(
            FAILOVER_SPAN,
            own,
            start_ns=start_ns,
            end_ns=acknowledged_ns,
            attributes=attributes,
            scope=__name__,
        )
    except Exception:
        _log.warning("cluster: failover of %s not emitted", assignment.channel, exc_info=True)
        return False
