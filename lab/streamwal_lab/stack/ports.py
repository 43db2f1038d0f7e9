"""The local stack's ports, declared once, and the environment that hands them on.

The stack stays out of the way of a Pulsar or etcd a developer already runs on the
standard ports (the product's defaults, :mod:`streamwal.defaults`): its broker and its
etcd listen on ports of their own. Every process the lab starts, and the test suite,
reaches them through :mod:`streamwal.environment`'s variables (:func:`environment`),
which stand in for the product's defaults without overriding a file or a flag. The
collector keeps OTLP's standard ports (its job is to be where exporters look), so
Jaeger's own receivers move aside; Jaeger's query port is the standard one.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from streamwal import environment as product_environment

__all__ = [
    "COLLECTOR_HEALTH_PORT",
    "COLLECTOR_METRICS_PORT",
    "COLLECTOR_OTLP_GRPC_PORT",
    "COLLECTOR_OTLP_HTTP_PORT",
    "ETCD_CLIENT_PORT",
    "ETCD_ENDPOINT",
    "ETCD_PEER_PORT",
    "JAEGER_HEALTH_PORT",
    "JAEGER_OTLP_GRPC_PORT",
    "JAEGER_OTLP_HTTP_PORT",
    "JAEGER_QUERY_GRPC_PORT",
    "JAEGER_QUERY_PORT",
    "JAEGER_URL",
    "LOCAL_HOST",
    "PULSAR_ADMIN_URL",
    "PULSAR_BROKER_PORT",
    "PULSAR_SERVICE_URL",
    "PULSAR_WEB_PORT",
    "environment",
    "export_environment",
]

#: the stack binds loopback only
LOCAL_HOST = "127.0.0.1"

#: Pulsar's binary protocol (a stock broker: 6650)
PULSAR_BROKER_PORT = 16650
#: Pulsar's web service, the admin REST API (a stock broker: 8080)
PULSAR_WEB_PORT = 18080
#: etcd's client and peer ports (stock: 2379, 2380)
ETCD_CLIENT_PORT = 12379
ETCD_PEER_PORT = 12380
#: Jaeger's query UI and API (stock), its query gRPC and health check
JAEGER_QUERY_PORT = 16686
JAEGER_QUERY_GRPC_PORT = 16685
JAEGER_HEALTH_PORT = 13134
#: Jaeger's OTLP receivers, beside the collector's standard ones
JAEGER_OTLP_GRPC_PORT = 14317
JAEGER_OTLP_HTTP_PORT = 14318
#: the OpenTelemetry Collector: OTLP's standard ports, its health check, its own metrics
COLLECTOR_OTLP_GRPC_PORT = 4317
COLLECTOR_OTLP_HTTP_PORT = 4318
COLLECTOR_HEALTH_PORT = 13133
COLLECTOR_METRICS_PORT = 8888

PULSAR_SERVICE_URL = f"pulsar://{LOCAL_HOST}:{PULSAR_BROKER_PORT}"
PULSAR_ADMIN_URL = f"http://{LOCAL_HOST}:{PULSAR_WEB_PORT}"
ETCD_ENDPOINT = f"{LOCAL_HOST}:{ETCD_CLIENT_PORT}"
JAEGER_URL = f"http://{LOCAL_HOST}:{JAEGER_QUERY_PORT}"


def environment() -> dict[str, str]:
    """The variables that point the product's defaults at this stack."""
    return {
        product_environment.PULSAR_SERVICE_URL: PULSAR_SERVICE_URL,
        product_environment.PULSAR_ADMIN_URL: PULSAR_ADMIN_URL,
        product_environment.ETCD_ENDPOINTS: ETCD_ENDPOINT,
        product_environment.JAEGER_URL: JAEGER_URL,
    }


def export_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Set :func:`environment` in ``environ`` (the process's), so this process's defaults
    and every process it starts reach the stack; a variable already set is kept, so a
    developer can still point the lab's tools elsewhere."""
    target = os.environ if environ is None else environ
    for name, value in environment().items():
        target.setdefault(name, value)
