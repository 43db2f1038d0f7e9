"""Wiring the OpenTelemetry SDK at node start-up (library code uses the API only).

Traces: a ``TracerProvider`` whose resource follows the semantic conventions:
``service.name`` is the logical service (``OTEL_SERVICE_NAME``, else
``telemetry.service_name``, ``streamwal-node``), ``service.instance.id`` is
``node-<id>`` and ``streamwal.node.id`` the id, so Jaeger shows each node as a process
of its own. Every span the node's provider starts carries ``streamwal.node.id`` too
(:class:`~streamwal.node.tracing.NodeIdProcessor`): the one key the Find box and
``streamwal trace`` read. New root traces are sampled as ``tracing:`` (or
``OTEL_TRACES_SAMPLER``/``_ARG``) says, lifecycle spans always
(:mod:`streamwal.node.tracing`). Spans are batched to the SDK's OTLP/gRPC exporter
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or the config names an endpoint. TLS follows the
OpenTelemetry rules, read by the exporter itself: an ``https://`` endpoint is TLS;
otherwise ``OTEL_EXPORTER_OTLP_INSECURE`` decides when set, and when unset an
``http://`` endpoint (the local stack's collector) is plain text and any other is TLS.
``OTEL_EXPORTER_OTLP_CERTIFICATE`` and the client certificate and key variables
configure that TLS. Metrics: a ``MeterProvider`` read by the Prometheus exporter and
served on ``/metrics``, beside the WAL's single-append latency, which the WAL keeps
outside the SDK (:mod:`streamwal.node.append_histogram`). A telemetry failure is
logged, never raised into the node.

One process may host several nodes (the demo runs two beside its client): it sets
telemetry up with ``one_node=False``; its own resource then names its role
(``streamwal-client``), and :meth:`Telemetry.node_tracer_provider` gives each node a
provider whose resource names that node, sharing the exporter and the sampler.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from opentelemetry import metrics, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

from streamwal.node.append_histogram import register_append_durations
from streamwal.node.config import NodeConfig, TracingSettings
from streamwal.node.tracing import (
    ClientSpanNamer,
    LifecycleSampler,
    NodeIdProcessor,
    RoutingTracerProvider,
    base_sampler,
)
from streamwal.version import __version__

__all__ = [
    "CLIENT_SERVICE",
    "NODE_ID_ATTRIBUTE",
    "Telemetry",
    "node_resource",
    "sampler_of",
    "setup_telemetry",
    "span_exporter",
]

_log = logging.getLogger(__name__)

#: The node id, as a resource attribute and as an attribute of every span a node makes.
NODE_ID_ATTRIBUTE = "streamwal.node.id"
#: ``service.name`` of a process that calls nodes (the demo's driver, tools)
CLIENT_SERVICE = "streamwal-client"


@dataclass
class Telemetry:
    tracer_provider: TracerProvider | None
    metrics_port: int | None
    #: whether ``tracer_provider``'s resource is a node's (``streamwal serve``)
    one_node: bool = True
    _sampler: Sampler | None = None
    _processors: list[SpanProcessor] = field(default_factory=list)
    _nodes: dict[int, TracerProvider] = field(default_factory=dict)

    def node_tracer_provider(self, config: NodeConfig) -> TracerProvider | None:
        """The provider a node of this process makes its spans with (give it to
        :class:`~streamwal.server.runtime.Node`); ``None`` when tracing is off."""
        if self.tracer_provider is None or self.one_node:
            return self.tracer_provider
        found = self._nodes.get(config.node.id)
        if found is None:
            found = TracerProvider(resource=node_resource(config), sampler=self._sampler)
            found.add_span_processor(NodeIdProcessor(NODE_ID_ATTRIBUTE, config.node.id))
            found.add_span_processor(ClientSpanNamer())
            for processor in self._processors:
                found.add_span_processor(processor)
            self._nodes[config.node.id] = found
        return found

    def shutdown(self) -> None:
        if self.tracer_provider is not None:
            try:
                for provider in self._nodes.values():
                    provider.force_flush(timeout_millis=5000)
                self.tracer_provider.force_flush(timeout_millis=5000)
                self.tracer_provider.shutdown()  # the shared exporter with it
            except Exception:
                _log.warning("flushing traces failed", exc_info=True)


def node_resource(config: NodeConfig) -> Resource:
    """One node, by the resource conventions (see the module docstring)."""
    return Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or config.telemetry.service_name,
            "service.instance.id": f"node-{config.node.id}",
            "service.version": __version__,
            NODE_ID_ATTRIBUTE: config.node.id,
        }
    )


def _process_resource(service: str) -> Resource:
    return Resource.create({"service.name": service, "service.version": __version__})


def sampler_of(settings: TracingSettings) -> Sampler:
    """The standard sampler ``settings`` names, with the lifecycle spans kept."""
    return LifecycleSampler(base_sampler(settings.sampler, settings.ratio))


def span_exporter(endpoint: str) -> SpanExporter:
    """The SDK's OTLP/gRPC exporter to ``endpoint``; TLS as the module docstring says."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    # no ``insecure`` argument: the exporter then reads the scheme and OTEL_EXPORTER_OTLP_*
    return OTLPSpanExporter(endpoint=endpoint)


def setup_telemetry(
    config: NodeConfig,
    *,
    one_node: bool = True,
    service: str = CLIENT_SERVICE,
    serve_metrics: bool = True,
) -> Telemetry:
    """Install the global tracer and meter providers for this process.

    ``one_node=False``: the process hosts several nodes, so its resource names none of
    them (``config.node.id`` would be wrong for all but one) but its role, ``service``;
    each node takes a provider of its own from :meth:`Telemetry.node_tracer_provider`.
    A second set-up with ``one_node=False`` leaves the global provider as the first
    set it: the caller routes its spans to the new one with
    :func:`~streamwal.node.tracing.routed_to`.
    ``serve_metrics=False``: the caller serves the registry itself (``streamwal serve``
    does, beside its probes: :mod:`streamwal.node.endpoints`).
    """
    _quiet_foreign_detach()
    resource = node_resource(config) if one_node else _process_resource(service)
    telemetry = Telemetry(tracer_provider=None, metrics_port=None, one_node=one_node)
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or config.telemetry.otlp_endpoint
    if config.telemetry.tracing:
        sampler = telemetry._sampler = sampler_of(config.tracing)
        provider = telemetry.tracer_provider = TracerProvider(resource=resource, sampler=sampler)
        if one_node:
            provider.add_span_processor(NodeIdProcessor(NODE_ID_ATTRIBUTE, config.node.id))
        provider.add_span_processor(ClientSpanNamer())
        if endpoint:
            try:
                processor = BatchSpanProcessor(span_exporter(endpoint), schedule_delay_millis=500)
                provider.add_span_processor(processor)
                telemetry._processors.append(processor)
                _log.info("exporting traces over OTLP to %s", endpoint)
            except Exception:
                _log.warning("cannot export traces to %s", endpoint, exc_info=True)
        if one_node or not isinstance(trace.get_tracer_provider(), RoutingTracerProvider):
            trace.set_tracer_provider(provider if one_node else RoutingTracerProvider(provider))
        # else a second set-up in a process hosting nodes (the demo's parts): the global
        # provider can be set once only, so the caller routes to this one (routed_to)
    telemetry.metrics_port = _setup_metrics(config, resource, serve_metrics)
    return telemetry


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


def _setup_metrics(config: NodeConfig, resource: Resource, serve: bool = True) -> int | None:
    if not config.node.metrics_listen:
        return None
    if not serve:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from prometheus_client import REGISTRY

        reader = PrometheusMetricReader(scope_info_enabled=False)  # no otel_scope_* labels
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
        register_append_durations(REGISTRY)
        return None
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from prometheus_client import REGISTRY, start_http_server

        from streamwal.node.metric_scope import ScopedRegistry

        host, _, port = config.node.metrics_listen.rpartition(":")
        reader = PrometheusMetricReader(scope_info_enabled=False)  # no otel_scope_* labels
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
        register_append_durations(REGISTRY)
        server, _thread = start_http_server(int(port), addr=host, registry=ScopedRegistry(REGISTRY))
        bound = int(server.server_address[1])
        _log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound
    except Exception:
        _log.warning("cannot serve metrics on %s", config.node.metrics_listen, exc_info=True)
        return None
