"""A trace as terminal text: one line per span, its errors on the lines below it.

Made for a shell on a server with no browser: plain ASCII, fixed columns first
(start offset, duration, status, node, a timeline bar), then the span's place in
the tree, its operation, service and the key attributes (channel, attempt, reason...);
its errors on the lines below, then every other attribute on one more. Pure functions of a
:class:`~streamwal.node.trace.model.TraceView`, so a test can check the text line by line.
"""

from __future__ import annotations

import math
from typing import Any

from streamwal.node.trace.model import TraceSpan, TraceView

__all__ = ["format_duration", "render_waterfall", "status_label"]

_BAR_WIDTH = 24
_NODE_KEY = "streamwal.node.id"
_STATUS = {"ok": "ok", "error": "ERROR", "unset": "-"}


def format_duration(us: int) -> str:
    """``12.3 ms`` below ten seconds, ``12.34 s`` from there on."""
    if us < 10_000_000:
        return f"{us / 1000:.1f} ms"
    return f"{us / 1_000_000:.2f} s"


def status_label(status: str) -> str:
    """``ok``, ``ERROR`` (loud on purpose) or ``-`` for a span that set no status."""
    return _STATUS.get(status, status)


def render_waterfall(view: TraceView, *, bar_width: int = _BAR_WIDTH) -> list[str]:
    """The lines of ``view``'s waterfall (no trailing newlines).

    The bar spans the whole trace; each span's ``=`` run starts and ends in the
    columns its start and end fall in, and is at least one column wide.
    """
    services = sorted({s.service for s in view.spans})
    lines = [
        f"trace {view.trace_id}: {len(view.spans)} spans, {format_duration(view.duration_us)}, "
        f"services {', '.join(services) or '-'}",
        f"{'offset':>10} {'duration':>10}  {'status':<6} {'node':>4}  "
        f"{'timeline':<{bar_width + 2}}  span",
    ]
    blank = " " * len(_columns(view.spans[0], view, bar_width)) if view.spans else ""
    for span in view.spans:
        label = f"{_tree(span.depth)}{span.operation}  [{span.service}]"
        key = [(k, v) for k, v in span.attributes.items() if "." not in k]
        # the node column shows the node id already
        rest = [(k, v) for k, v in span.attributes.items() if "." in k and k != _NODE_KEY]
        attributes = " ".join(f"{k}={_value(v)}" for k, v in key)
        label += f"  {attributes}" if attributes else ""
        lines.append(_columns(span, view, bar_width) + label)
        indent = f"{blank}{' ' * len(_tree(span.depth))}"
        for message in span.errors:
            lines.append(f"{indent}! {message}")
        if rest:
            lines.append(f"{indent}  " + " ".join(f"{k}={_value(v)}" for k, v in rest))
    return lines


def _columns(span: TraceSpan, view: TraceView, bar_width: int) -> str:
    return (
        f"{format_duration(span.offset_us):>10} {format_duration(span.duration_us):>10}  "
        f"{status_label(span.status):<6} {span.node or '-':>4}  "
        f"|{_bar(span, view.duration_us, bar_width)}|  "
    )


def _bar(span: TraceSpan, total_us: int, width: int) -> str:
    if total_us <= 0:
        return "=" * width
    first = min(int(span.offset_us * width / total_us), width - 1)
    last = math.ceil((span.offset_us + span.duration_us) * width / total_us)
    last = min(max(last, first + 1), width)
    return " " * first + "=" * (last - first) + " " * (width - last)


def _tree(depth: int) -> str:
    return "" if depth == 0 else "  " * (depth - 1) + "`- "


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
