"""Traces a person can read in a terminal: one trace as a waterfall, recent opens ranked.

Reads Jaeger's HTTP query API; ``streamwal trace show`` and ``streamwal trace opens``
(:mod:`node.trace.cli`) print what :func:`render_waterfall` and :func:`render_opens`
make of it.
"""

from node.trace.jaeger import TraceNotFoundError, default_jaeger_url, fetch_trace
from node.trace.model import TraceSpan, TraceView, trace_view
from node.trace.opens import OpenSummary, recent_opens, render_opens
from node.trace.waterfall import render_waterfall

__all__ = [
    "OpenSummary",
    "TraceNotFoundError",
    "TraceSpan",
    "TraceView",
    "default_jaeger_url",
    "fetch_trace",
    "recent_opens",
    "render_opens",
    "render_waterfall",
    "trace_view",
]
