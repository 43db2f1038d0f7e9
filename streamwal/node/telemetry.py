"""Wiring the OpenTelemetry SDK at node start-up (library code uses the API only).

Traces: a ``TracerProvider`` whose resource carries ``service.name`` (from
``OTEL_SERVICE_NAME``, else the config) and ``streamwal.node.id``; spans are
batched to an OTLP/gRPC exporter when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or the config
names an endpoint. TLS follows the OpenTelemetry rules, read by the exporter
itself: an ``https://`` endpoint is TLS; otherwise ``OTEL_EXPORTER_OTLP_INSECURE``
decides when set, and when unset an ``http://`` endpoint (the local stack's
collector) is plain text and any other is TLS. ``OTEL_EXPORTER_OTLP_CERTIFICATE``
and the client certificate and key variables configure that TLS. Metrics: a
``MeterProvider`` read by the Prometheus exporter and served on ``/metrics``. A
telemetry failure is logged, never raised into the node.

The node id is also a span attribute (:data:`NODE_ID_ATTRIBUTE`) on the spans of the
node's gRPC service. A resource belongs to a process, and one process may host
several nodes (the demo runs two): such a process sets telemetry up with
``one_node=False``, its resource names no node, and only the span attribute says
which node did the work. In a ``streamwal serve`` process both agree.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from opentelemetry import metrics, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from streamwal.node.config import NodeConfig

__all__ = ["NODE_ID_ATTRIBUTE", "Telemetry", "setup_telemetry", "span_exporter"]

_log = logging.getLogger(__name__)

#: The node id, as a resource attribute and as an attribute of the service's spans.
NODE_ID_ATTRIBUTE = "streamwal.node.id"


@dataclass
class Telemetry:
    tracer_provider: TracerProvider | None
    metrics_port: int | None

    def shutdown(self) -> None:
        if self.tracer_provider is not None:
            try:
                self.tracer_provider.force_flush(timeout_millis=5000)
                self.tracer_provider.shutdown()
            except Exception:
                _log.warning("flushing traces failed", exc_info=True)


def _resource(config: NodeConfig, one_node: bool) -> Resource:
    name = os.environ.get("OTEL_SERVICE_NAME") or config.telemetry.service_name
    if not one_node:
        return Resource.create({"service.name": name})
    return Resource.create(
        {
            "service.name": name,
            "service.instance.id": f"node-{config.node.id}",
            NODE_ID_ATTRIBUTE: config.node.id,
        }
    )


def span_exporter(endpoint: str) -> SpanExporter:
    """OTLP/gRPC to ``endpoint``; TLS as the module docstring says. The SDK's exporter
    with the node's own encoder (:mod:`streamwal.node.otlp_encoding`: the same message,
    without a protobuf object per attribute)."""
    from streamwal.node.otlp_encoding import FastOTLPSpanExporter

    # no ``insecure`` argument: the exporter then reads the scheme and OTEL_EXPORTER_OTLP_*
    return FastOTLPSpanExporter(endpoint=endpoint)


def setup_telemetry(config: NodeConfig, *, one_node: bool = True) -> Telemetry:
    """Install the global tracer and meter providers for this process.

    ``one_node=False``: the process hosts several nodes, so the resource names none
    of them (``config.node.id`` would be wrong for all but one).
    """
    _quiet_foreign_detach()
    resource = _resource(config, one_node)
    tracer_provider: TracerProvider | None = None
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or config.telemetry.otlp_endpoint
    if config.telemetry.tracing:
        tracer_provider = TracerProvider(resource=resource)
        if endpoint:
            try:
                exporter = span_exporter(endpoint)
                tracer_provider.add_span_processor(
                    BatchSpanProcessor(exporter, schedule_delay_millis=500)
                )
                _log.info("exporting traces over OTLP to %s", endpoint)
            except Exception:
                _log.warning("cannot export traces to %s", endpoint, exc_info=True)
        trace.set_tracer_provider(tracer_provider)
    metrics_port = _setup_metrics(config, resource)
    return Telemetry(tracer_provider=tracer_provider, metrics_port=metrics_port)


class _ForeignDetachFilter(logging.Filter):
    """Turns OpenTelemetry's "Failed to detach context" traceback into one DEBUG line
    when the token was made in another context, and only then.

    An instrumentation that keeps a span current across the yields of a streaming
    handler (OpenTelemetry's generic gRPC server interceptor did; the node's own,
    :mod:`streamwal.node.server_tracing`, leaves a stream's context attached instead)
    resets it when the generator ends. When a client goes away mid-stream, grpcio drops
    the generator unfinished, and asyncio closes it later in a task of its own: the span
    still ends, but resetting the context var from that task raises ``ValueError`` and
    the API logs a traceback per killed stream, which says nothing about the node.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if (
            record.getMessage() == "Failed to detach context"
            and isinstance(error, ValueError)
            and "different Context" in str(error)
        ):
            _log.debug("a span's context was reset from another task (a stream went away)")
            return False
        return True


_DETACH_FILTER = _ForeignDetachFilter()


def _quiet_foreign_detach() -> None:
    logger = logging.getLogger("opentelemetry.context")
    if _DETACH_FILTER not in logger.filters:
        logger.addFilter(_DETACH_FILTER)


def _setup_metrics(config: NodeConfig, resource: Resource) -> int | None:
    if not config.node.metrics_listen:
        return None
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from prometheus_client import start_http_server

        host, _, port = config.node.metrics_listen.rpartition(":")
        reader = PrometheusMetricReader()
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
        server, _thread = start_http_server(int(port), addr=host)
        bound = int(server.server_address[1])
        _log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound
    except Exception:
        _log.warning("cannot serve metrics on %s", config.node.metrics_listen, exc_info=True)
        return None
