"""The local development stack's endpoints, which are also the product's defaults.

``streamwal stack up`` (the lab) starts Pulsar, etcd and Jaeger on these ports, and
every default of the product points at them: ``streamwal serve`` with no file, a
``PulsarConfig()``, a ``TsoConfig()``, ``streamwal trace`` all reach that stack. Each
port is declared here once; the product's configs and the lab's stack import it, so
the two cannot drift apart. Changing a value here moves the stack and the defaults
together (a running stack keeps the ports it started on).
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
    "PULSAR_BROKER_PORT",
    "PULSAR_SERVICE_URL",
    "PULSAR_WEB_PORT",
]

#: the stack binds loopback only
LOCAL_HOST = "127.0.0.1"

#: Pulsar's binary protocol (a stock broker: 6650)
PULSAR_BROKER_PORT = 16650
#: Pulsar's web service: the admin REST API (a stock broker: 8080), which
#: ``admin_url_for`` pairs with :data:`PULSAR_BROKER_PORT`
PULSAR_WEB_PORT = 18080
#: etcd's client port (stock: 2379)
ETCD_CLIENT_PORT = 12379
#: Jaeger's query UI and API (stock: 16686)
JAEGER_QUERY_PORT = 16686
#: a node's gRPC service (``node.listen``)
NODE_PORT = 17001
#: a node's Prometheus ``/metrics`` (``node.metrics_listen``)
METRICS_PORT = 9464

#: ``PulsarConfig.service_url``
PULSAR_SERVICE_URL = f"pulsar://{LOCAL_HOST}:{PULSAR_BROKER_PORT}"
#: ``TsoConfig.etcd_endpoints``, the node's ``etcd.endpoints``, the CLIs' ``--etcd``
ETCD_ENDPOINT = f"{LOCAL_HOST}:{ETCD_CLIENT_PORT}"
#: where ``streamwal trace`` reads traces (``STREAMWAL_JAEGER_URL`` wins)
JAEGER_URL = f"http://{LOCAL_HOST}:{JAEGER_QUERY_PORT}"
#: ``node.listen``
NODE_LISTEN = f"{LOCAL_HOST}:{NODE_PORT}"
#: ``node.metrics_listen``
METRICS_LISTEN = f"{LOCAL_HOST}:{METRICS_PORT}"
