"""The environment variables that name the product's endpoints, read here only.

Each one stands in for a default of :mod:`streamwal.defaults`: an explicit value (a
constructor argument, a key in a node's file, a command's flag) wins over it, and it
wins over the standard local endpoint. That order lets one environment point every
default at another stack (the lab exports its stack's ports this way for the
processes it starts and for the test suite) without overriding what a file or a
caller says. They are not the node's ``STREAMWAL_<SECTION>__<KEY>`` variables, which
override a node's file (``streamwal.node.config``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from streamwal import defaults

__all__ = [
    "ETCD_ENDPOINTS",
    "JAEGER_URL",
    "PULSAR_ADMIN_URL",
    "PULSAR_SERVICE_URL",
    "TOKEN_FILE",
    "VARIABLES",
    "default_from",
    "etcd_endpoints",
    "jaeger_url",
    "pulsar_admin_url",
    "pulsar_service_url",
    "set_by",
    "token_file",
]

#: the broker's binary URL, ``pulsar://host:port``: ``PulsarConfig.service_url``,
#: the node's ``pulsar.service_url``, the CLIs' ``--pulsar``
PULSAR_SERVICE_URL = "STREAMWAL_PULSAR_SERVICE_URL"
#: the admin API of the broker :data:`PULSAR_SERVICE_URL` names (used only for that
#: broker, so a caller that names another one does not read the wrong broker's policies)
PULSAR_ADMIN_URL = "STREAMWAL_PULSAR_ADMIN_URL"
#: etcd's client endpoints, comma separated: ``TsoConfig.etcd_endpoints``, the node's
#: ``etcd.endpoints``, the CLIs' ``--etcd``
ETCD_ENDPOINTS = "STREAMWAL_ETCD_ENDPOINTS"
#: Jaeger's query API, which ``streamwal trace`` reads (``--jaeger`` wins)
JAEGER_URL = "STREAMWAL_JAEGER_URL"

#: a file holding the bearer token ``NodeClient``, ``ClusterClient`` and the
#: ``streamwal`` commands send when none is given (``--token-file`` wins), for nodes
#: with ``auth.enabled``; it has no default: unset, no token is sent
TOKEN_FILE = "STREAMWAL_TOKEN_FILE"

#: every variable with the standard default it replaces
VARIABLES: Mapping[str, str] = {
    PULSAR_SERVICE_URL: defaults.PULSAR_SERVICE_URL,
    PULSAR_ADMIN_URL: defaults.PULSAR_ADMIN_URL,
    ETCD_ENDPOINTS: defaults.ETCD_ENDPOINT,
    JAEGER_URL: defaults.JAEGER_URL,
}


def _get(name: str, environ: Mapping[str, str] | None) -> str:
    """The variable's value, stripped; empty when unset (an empty value is unset)."""
    return (os.environ if environ is None else environ).get(name, "").strip()


def pulsar_service_url(environ: Mapping[str, str] | None = None) -> str:
    """``$STREAMWAL_PULSAR_SERVICE_URL``, else Pulsar's standard local broker."""
    return _get(PULSAR_SERVICE_URL, environ) or defaults.PULSAR_SERVICE_URL


def pulsar_admin_url(service_url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``$STREAMWAL_PULSAR_ADMIN_URL`` when ``service_url`` is the broker the environment
    names (:func:`pulsar_service_url`); else ``None``, and the caller derives it."""
    admin = _get(PULSAR_ADMIN_URL, environ)
    if not admin or service_url.rstrip("/") != pulsar_service_url(environ).rstrip("/"):
        return None
    return admin.rstrip("/")


def etcd_endpoints(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``$STREAMWAL_ETCD_ENDPOINTS`` (comma separated), else etcd's standard local one."""
    given = tuple(e.strip() for e in _get(ETCD_ENDPOINTS, environ).split(",") if e.strip())
    return given or (defaults.ETCD_ENDPOINT,)


def jaeger_url(environ: Mapping[str, str] | None = None) -> str:
    """``$STREAMWAL_JAEGER_URL``, else Jaeger's standard local query API."""
    return (_get(JAEGER_URL, environ) or defaults.JAEGER_URL).rstrip("/")


def default_from(variable: str) -> dict[str, str]:
    """A field's metadata: ``variable`` stands in for its default (beneath a file),
    which ``streamwal config show`` lists beside the field."""
    return {"default_env": variable}


def set_by(variable: str) -> dict[str, str]:
    """A field's metadata: a standard variable (OpenTelemetry's) wins over the file
    for this field, which ``streamwal config show`` lists beside it."""
    return {"env": variable}


def token_file(environ: Mapping[str, str] | None = None) -> str | None:
    """:data:`TOKEN_FILE`, or ``None`` when unset."""
    return _get(TOKEN_FILE, environ) or None
