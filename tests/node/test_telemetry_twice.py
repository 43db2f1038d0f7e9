"""A process hosting nodes may set telemetry up twice (the demo's two parts run in one
process): the global provider can be set once only, so the second set-up leaves it and
its spans reach it through routing, without OpenTelemetry's "Overriding" warning."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from streamwal.node.config import load_config
from streamwal.node.telemetry import setup_telemetry
from streamwal.node.tracing import routed_to

config = load_config(environ={"STREAMWAL_NODE__METRICS_LISTEN": ""})
setup_telemetry(config, one_node=False).shutdown()
second = setup_telemetry(config, one_node=False)
kept = InMemorySpanExporter()
second.tracer_provider.add_span_processor(SimpleSpanProcessor(kept))
with routed_to(second.tracer_provider):
    trace.get_tracer("t").start_span("cluster.move").end()
print(len(kept.get_finished_spans()))
"""


def test_a_second_set_up_is_routed_to_and_warns_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1", (done.stdout, done.stderr)
    assert "Overriding" not in done.stderr, done.stderr
