"""The product's default endpoints: Pulsar's, etcd's and OpenTelemetry's standard ones.

A ``PulsarConfig()``, a ``TsoConfig()``, ``streamwal serve`` with no file and the CLIs
reach a stock Pulsar and etcd on this machine, where every user of them expects
them, unless :mod:`streamwal.environment` names others (the lab's local stack runs
on ports of its own, ``streamwal_lab.stack.ports``, and hands them on that way). Each
port is declared here once.
"""

from __future__ import annotations

__all__ = [
    "ETCD_CLIENT_PORT",
    "ETCD_ENDPOINT",
    "JAEGER_QUERY_PORT",
    "JAEGER_URL",
    "LOCAL_HOST",
    "METRICS_LISTEN",
    "METRICS_PORT",
    "NODE_LISTEN",
    "NODE_PORT",
    "OTLP_ENDPOINT",
    "OTLP_GRPC_PORT",
    "PULSAR_ADMIN_URL",
    "PULSAR_BROKER_PORT",
    "PULSAR_SERVICE_URL",
    "PULSAR_WEB_PORT",
]

LOCAL_HOST = "127.0.0.1"

#: Pulsar's binary protocol
PULSAR_BROKER_PORT = 6650
#: Pulsar's web service: the admin REST API, which ``admin_url_for`` pairs with
#: :data:`PULSAR_BROKER_PORT`
PULSAR_WEB_PORT = 8080
#: etcd's client port
ETCD_CLIENT_PORT = 2379
#: Jaeger's query UI and API
JAEGER_QUERY_PORT = 16686
#: OTLP over gRPC, a collector's receiver
OTLP_GRPC_PORT = 4317
#: a node's gRPC service (``node.listen``)
NODE_PORT = 17001
#: a node's Prometheus ``/metrics`` (``node.metrics_listen``; the Prometheus exporter's)
METRICS_PORT = 9464

#: ``PulsarConfig.service_url`` (``STREAMWAL_PULSAR_SERVICE_URL`` wins)
PULSAR_SERVICE_URL = f"pulsar://{LOCAL_HOST}:{PULSAR_BROKER_PORT}"
#: the admin API beside :data:`PULSAR_SERVICE_URL`
PULSAR_ADMIN_URL = f"http://{LOCAL_HOST}:{PULSAR_WEB_PORT}"
#: ``TsoConfig.etcd_endpoints``, the node's ``etcd.endpoints``, the CLIs' ``--etcd``
#: (``STREAMWAL_ETCD_ENDPOINTS`` wins)
ETCD_ENDPOINT = f"{LOCAL_HOST}:{ETCD_CLIENT_PORT}"
#: where ``streamwal trace`` reads traces (``STREAMWAL_JAEGER_URL`` wins)
JAEGER_URL = f"http://{LOCAL_HOST}:{JAEGER_QUERY_PORT}"
#: where a node exports traces when told to (``telemetry.otlp_endpoint``, whose default
#: is no export; ``OTEL_EXPORTER_OTLP_ENDPOINT`` wins)
OTLP_ENDPOINT = f"http://{LOCAL_HOST}:{OTLP_GRPC_PORT}"
#: ``node.listen``
NODE_LISTEN = f"{LOCAL_HOST}:{NODE_PORT}"
#: ``node.metrics_listen``
METRICS_LISTEN = f"{LOCAL_HOST}:{METRICS_PORT}"
