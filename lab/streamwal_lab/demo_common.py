"""What both parts of ``streamwal demo`` share: the narration, the stack, trace links.

:mod:`streamwal_lab.demo` (the entry point and the first part) runs
:mod:`streamwal_lab.demo_cluster` (the second part); both use this module, which
imports neither, so the two parts do not import each other.
"""

from __future__ import annotations

import sys
from typing import Any

from streamwal.node.trace.model import trace_view
from streamwal.node.trace.waterfall import render_waterfall
from streamwal_lab.stack import Stack, StackInfo
from streamwal_lab.stack.stack import StackError
from streamwal_lab.stack.topics import delete_topics

__all__ = ["delete_demo_topics", "say", "stack_up", "trace_link", "warn", "waterfall"]


def say(text: str) -> None:
    print(text, flush=True)


def warn(text: str) -> None:
    """Something the demo could not show; it goes on, but the reader must notice."""
    print(f"WARNING: {text}", flush=True)
    print(f"streamwal demo: warning: {text}", file=sys.stderr, flush=True)


async def delete_demo_topics(info: StackInfo, channels: list[str]) -> None:
    """The demo's channels off the dev broker once it has checked them: each run made
    fresh ones, and the stack's disk is not the demo's to fill. Best effort: a topic
    still in use, or a broker that does not answer, is left (and said)."""
    topics = [f"persistent://public/default/{channel}" for channel in channels]
    try:
        deleted = await delete_topics(info.pulsar_admin_url, topics)
    except (OSError, RuntimeError) as exc:
        warn(f"could not delete the demo's topics: {exc}")
        return
    if deleted < len(topics):
        warn(f"deleted {deleted} of the demo's {len(topics)} topics; the rest stay on the broker")


async def stack_up() -> tuple[StackInfo, bool]:
    """The stack's addresses, and whether the collector and Jaeger run."""
    stack = Stack()
    say("== starting the local stack (installs on first use; later runs reuse it)")
    info = await stack.up(["etcd", "pulsar"])
    telemetry = [n for n in ("jaeger", "otel-collector") if n in stack.services]
    if len(telemetry) < 2:
        warn("no collector/Jaeger in this build: no trace URL will be given")
        return info, False
    try:
        return await stack.up(telemetry), True
    except StackError as exc:
        warn(f"the collector or Jaeger did not start ({exc}): no trace URL will be given")
        return info, False


def waterfall(trace: dict[str, Any]) -> None:
    for line in render_waterfall(trace_view(trace)):
        say(f"   {line}")


def trace_link(jaeger_url: str, trace_id: str, ui_real: bool | None) -> str:
    if ui_real:
        return f"{jaeger_url}/trace/{trace_id}"
    return f"{trace_id} (`streamwal trace show {trace_id}`)"
