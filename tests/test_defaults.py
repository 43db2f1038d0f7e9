"""Each local endpoint is declared once, in :mod:`streamwal.defaults`.

The product's defaults point at the lab's local stack; both take the ports from that
module. A static check (the AST of every product and lab source file: literals only,
so comments and docstrings may still name a port) keeps a second copy from appearing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from streamwal import defaults
from streamwal.adaptors.pulsar.admin import admin_url_for
from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.node.config import load_config
from streamwal.node.trace.jaeger import DEFAULT_JAEGER_URL
from streamwal.tso.config import DEFAULT_ETCD_ENDPOINT, TsoConfig
from streamwal_lab.stack import etcd, jaeger, pulsar

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("streamwal", "adaptors", "tso", "lab/streamwal_lab")
PORTS = {
    defaults.PULSAR_BROKER_PORT,
    defaults.PULSAR_WEB_PORT,
    defaults.ETCD_CLIENT_PORT,
    defaults.JAEGER_QUERY_PORT,
    defaults.NODE_PORT,
    defaults.METRICS_PORT,
}


def test_the_values_are_the_local_stacks() -> None:
    assert defaults.PULSAR_SERVICE_URL == "pulsar://127.0.0.1:16650"
    assert defaults.ETCD_ENDPOINT == "127.0.0.1:12379"
    assert defaults.JAEGER_URL == "http://127.0.0.1:16686"
    assert defaults.NODE_LISTEN == "127.0.0.1:17001"
    assert defaults.METRICS_LISTEN == "127.0.0.1:9464"
    assert defaults.PULSAR_WEB_PORT == 18080


def test_the_product_defaults_come_from_one_module() -> None:
    config = load_config(environ={})
    assert config.pulsar.service_url == PulsarConfig().service_url == defaults.PULSAR_SERVICE_URL
    assert config.etcd.endpoints == TsoConfig().etcd_endpoints == (defaults.ETCD_ENDPOINT,)
    assert DEFAULT_ETCD_ENDPOINT == defaults.ETCD_ENDPOINT
    assert config.node.listen == defaults.NODE_LISTEN
    assert config.node.metrics_listen == defaults.METRICS_LISTEN
    assert DEFAULT_JAEGER_URL == defaults.JAEGER_URL
    assert admin_url_for(defaults.PULSAR_SERVICE_URL) == "http://127.0.0.1:18080"


def test_the_lab_stack_uses_the_same_ports() -> None:
    assert pulsar.BROKER_PORT == defaults.PULSAR_BROKER_PORT
    assert pulsar.WEB_PORT == defaults.PULSAR_WEB_PORT
    assert etcd.CLIENT_PORT == defaults.ETCD_CLIENT_PORT
    assert jaeger.QUERY_HTTP_PORT == defaults.JAEGER_QUERY_PORT


def _files() -> Iterator[Path]:
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" not in path.parts and not path.name.endswith(("_pb2.py", "_grpc.py")):
                yield path


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            found.add(id(node.value))
    return found


def test_no_port_is_declared_twice() -> None:
    here = (ROOT / "streamwal" / "defaults.py").resolve()
    found = []
    for path in _files():
        if path.resolve() == here:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in skip:
                continue
            value = node.value
            if (isinstance(value, int) and not isinstance(value, bool) and value in PORTS) or (
                isinstance(value, str) and any(f":{port}" in value for port in PORTS)
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {value!r}")
    assert found == [], "ports declared outside streamwal/defaults.py:\n" + "\n".join(found)
