"""A client call that waited for a channel's owner, as a span: how long, why, and a
link to the move that ended the wait.

A produce that retried across a failover is otherwise a run of failed calls in traces
of their own, nothing tying them to the failover that explains them. Once such a call
ends, its wait becomes one span, ``cluster.follow``, from its first failed try to its
end: the reasons it waited (``no owner``: the channel had none; ``owner gone``: the
owner did not answer or has no record; ``moved``: the owner refused, the channel is
elsewhere), how many tries, and a link to the ``cluster.move`` span the assignment it
found carries (with the failover's trace id when the move was a failover). It is kept
whatever the sampling ratio (a lifecycle span): a wait is rare and is what an operator
asks about. A call that did not wait makes no span here.
"""

from __future__ import annotations

import time

import grpc
from opentelemetry import trace
from opentelemetry.trace import Link, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from streamwal.cluster.records import Assignment
from streamwal.errors import ChannelNotFoundError
from streamwal.node.client import BatchProduceError
from streamwal.node.client_errors import NodeCallError
from streamwal.node.tracing import LIFECYCLE_ATTRIBUTE

__all__ = ["MOVED", "NO_OWNER", "NO_OWNER_DETAIL", "OWNER_GONE", "OwnerWait", "wait_reason"]

_tracer = trace.get_tracer(__name__)
_W3C = TraceContextTextMapPropagator()

NO_OWNER = "no owner"
OWNER_GONE = "owner gone"
MOVED = "moved"
#: what :meth:`ClusterClient.owner` says of a channel without an assignment
NO_OWNER_DETAIL = "has no owner yet"
_MOVED_CODES = frozenset({grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND})


def wait_reason(exc: BaseException) -> str:
    """Why a try failed, in the words of the module docstring."""
    if isinstance(exc, BatchProduceError) and exc.failed:
        return wait_reason(next(iter(exc.failed.values())))
    if isinstance(exc, NodeCallError):
        return MOVED if exc.code() in _MOVED_CODES else OWNER_GONE
    if isinstance(exc, ChannelNotFoundError) and NO_OWNER_DETAIL in str(exc):
        return NO_OWNER
    return OWNER_GONE


class OwnerWait:
    """One call's wait; :meth:`failed` per failed try, :meth:`ended` once."""

    def __init__(self, channel: str) -> None:
        self._channel = channel
        self._started_ns: int | None = None
        self._reasons: list[str] = []
        self._tries = 0

    def failed(self, exc: BaseException) -> None:
        if self._started_ns is None:
            self._started_ns = time.time_ns()
        self._tries += 1
        reason = wait_reason(exc)
        if reason not in self._reasons:
            self._reasons.append(reason)

    def ended(self, assignment: Assignment | None, error: BaseException | None = None) -> None:
        """The span of the wait, if there was one; never raises."""
        if self._started_ns is None:
            return
        try:
            self._emit(assignment, error)
        except Exception:  # a span is no reason to fail the call it describes
            return

    def _emit(self, assignment: Assignment | None, error: BaseException | None) -> None:
        assert self._started_ns is not None
        end_ns = time.time_ns()
        attributes: dict[str, AttributeValue] = {
            LIFECYCLE_ATTRIBUTE: True,
            "streamwal.channel": self._channel,
            "streamwal.cluster.waited_ms": (end_ns - self._started_ns) // 1_000_000,
            "streamwal.cluster.wait_reason": self._reasons[0],
            "streamwal.cluster.wait_reasons": list(self._reasons),
            "streamwal.cluster.tries": self._tries + (0 if error else 1),
        }
        links: list[Link] = []
        if assignment is not None:
            attributes["streamwal.cluster.to"] = assignment.node
            attributes["streamwal.cluster.reason"] = assignment.reason
            move = trace.get_current_span(_W3C.extract(assignment.trace)).get_span_context()
            if move.is_valid:
                links.append(Link(move, {"streamwal.link": "the move that ended the wait"}))
                attributes["streamwal.cluster.move_trace_id"] = format(move.trace_id, "032x")
            failover = trace.get_current_span(_W3C.extract(assignment.failover))
            if failover.get_span_context().is_valid:
                trace_id = failover.get_span_context().trace_id
                attributes["streamwal.cluster.failover_trace_id"] = format(trace_id, "032x")
        span = _tracer.start_span(
            "cluster.follow", attributes=attributes, links=links, start_time=self._started_ns
        )
        if error is not None:
            span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}")
        span.end(end_time=end_ns)
