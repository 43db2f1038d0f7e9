"""Traces a person can read in a terminal: one trace as a waterfall, recent opens ranked.

Reads Jaeger's HTTP query API; ``streamwal trace show`` and ``streamwal trace opens``
(:mod:`streamwal.node.trace.cli`) print what :func:`render_waterfall` and :func:`render_opens`
make of it.
"""

from streamwal.node.trace.jaeger import TraceNotFoundError, default_jaeger_url, fetch_trace
from streamwal.node.trace.model import TraceSpan, TraceView, trace_view
from streamwal.node.trace.opens import OpenSummary, recent_opens, render_opens
from streamwal.node.trace.waterfall import render_waterfall

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
