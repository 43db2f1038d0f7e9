"""The product's defaults are the standard local endpoints; the lab's stack keeps its own.

Each is declared once: the product's in :mod:`streamwal.defaults`, the stack's in
:mod:`streamwal_lab.stack.ports`, and the variables that stand in for the product's
defaults in :mod:`streamwal.environment`. A static check (the AST of every product and
lab source file: literals only, so comments and docstrings may still name a port)
keeps a second copy from appearing.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamwal import defaults, environment
from streamwal.adaptors.pulsar.admin import admin_url_for
from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.node.config import load_config
from streamwal.node.trace.jaeger import DEFAULT_JAEGER_URL, default_jaeger_url
from streamwal.tso.config import DEFAULT_ETCD_ENDPOINT, EtcdConfig, TsoConfig
from streamwal_lab.stack import collector, etcd, jaeger, ports, pulsar

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("streamwal", "adaptors", "tso", "lab/streamwal_lab")
#: where each port may be written as a number
DECLARING = {ROOT / "streamwal" / "defaults.py", ROOT / "lab/streamwal_lab/stack/ports.py"}
PORTS = {
    defaults.PULSAR_BROKER_PORT,
    defaults.PULSAR_WEB_PORT,
    defaults.ETCD_CLIENT_PORT,
    defaults.JAEGER_QUERY_PORT,
    defaults.OTLP_GRPC_PORT,
    defaults.NODE_PORT,
    defaults.METRICS_PORT,
    ports.PULSAR_BROKER_PORT,
    ports.PULSAR_WEB_PORT,
    ports.ETCD_CLIENT_PORT,
    ports.ETCD_PEER_PORT,
    ports.JAEGER_OTLP_GRPC_PORT,
    ports.JAEGER_OTLP_HTTP_PORT,
    ports.JAEGER_QUERY_GRPC_PORT,
    ports.JAEGER_HEALTH_PORT,
    ports.COLLECTOR_OTLP_HTTP_PORT,
    ports.COLLECTOR_HEALTH_PORT,
}
_VARIABLES = (
    environment.PULSAR_SERVICE_URL,
    environment.PULSAR_ADMIN_URL,
    environment.ETCD_ENDPOINTS,
    environment.JAEGER_URL,
)


@pytest.fixture
def no_endpoint_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's session exports the stack's ports (tests/conftest.py); these tests
    look at the product without them."""
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_the_values_are_the_standard_ones() -> None:
    assert defaults.PULSAR_SERVICE_URL == "pulsar://127.0.0.1:6650"
    assert defaults.PULSAR_ADMIN_URL == "http://127.0.0.1:8080"
    assert defaults.ETCD_ENDPOINT == "127.0.0.1:2379"
    assert defaults.JAEGER_URL == "http://127.0.0.1:16686"
    assert defaults.OTLP_ENDPOINT == "http://127.0.0.1:4317"
    assert defaults.NODE_LISTEN == "127.0.0.1:17001"
    assert defaults.METRICS_LISTEN == "127.0.0.1:9464"


@pytest.mark.usefixtures("no_endpoint_variables")
def test_the_product_defaults_are_the_standard_endpoints() -> None:
    config = load_config(environ={})
    assert config.pulsar.service_url == PulsarConfig().service_url == defaults.PULSAR_SERVICE_URL
    assert config.etcd.endpoints == TsoConfig().etcd.endpoints == (defaults.ETCD_ENDPOINT,)
    assert DEFAULT_ETCD_ENDPOINT == defaults.ETCD_ENDPOINT
    assert config.node.listen == defaults.NODE_LISTEN
    assert config.node.metrics_listen == defaults.METRICS_LISTEN
    assert DEFAULT_JAEGER_URL == default_jaeger_url() == defaults.JAEGER_URL
    assert admin_url_for(defaults.PULSAR_SERVICE_URL) == defaults.PULSAR_ADMIN_URL
    # the product knows nothing of the lab's ports
    assert admin_url_for(ports.PULSAR_SERVICE_URL) is None


def test_the_lab_stack_keeps_its_own_ports() -> None:
    assert ports.PULSAR_SERVICE_URL == "pulsar://127.0.0.1:16650"
    assert ports.PULSAR_ADMIN_URL == "http://127.0.0.1:18080"
    assert ports.ETCD_ENDPOINT == "127.0.0.1:12379"
    assert (pulsar.BROKER_PORT, pulsar.WEB_PORT) == (16650, 18080)
    assert (etcd.CLIENT_PORT, etcd.PEER_PORT) == (12379, 12380)
    assert jaeger.QUERY_HTTP_PORT == defaults.JAEGER_QUERY_PORT  # Jaeger's own
    assert collector.OTLP_GRPC_PORT == defaults.OTLP_GRPC_PORT  # where exporters look
    assert pulsar.BROKER_PORT != defaults.PULSAR_BROKER_PORT
    assert etcd.CLIENT_PORT != defaults.ETCD_CLIENT_PORT


def test_the_suite_reaches_the_stack_through_the_environment() -> None:
    assert {name: os.environ.get(name) for name in _VARIABLES} == ports.environment()
    assert PulsarConfig().service_url == ports.PULSAR_SERVICE_URL
    assert TsoConfig().etcd.endpoints == (ports.ETCD_ENDPOINT,)
    assert load_config().etcd.endpoints == (ports.ETCD_ENDPOINT,)
    assert admin_url_for(ports.PULSAR_SERVICE_URL) == ports.PULSAR_ADMIN_URL


@pytest.mark.usefixtures("no_endpoint_variables")
def test_the_variables_win_over_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.PULSAR_SERVICE_URL, "pulsar://broker.example:7650")
    monkeypatch.setenv(environment.PULSAR_ADMIN_URL, "https://admin.example:9443/")
    monkeypatch.setenv(environment.ETCD_ENDPOINTS, "e1:2379, e2:2379")
    monkeypatch.setenv(environment.JAEGER_URL, "http://jaeger.example:16686/")
    assert PulsarConfig().service_url == "pulsar://broker.example:7650"
    assert TsoConfig().etcd.endpoints == ("e1:2379", "e2:2379")
    assert default_jaeger_url() == "http://jaeger.example:16686"
    assert admin_url_for("pulsar://broker.example:7650") == "https://admin.example:9443"
    node = load_config()
    assert node.pulsar.service_url == "pulsar://broker.example:7650"
    assert node.etcd.endpoints == ("e1:2379", "e2:2379")


@pytest.mark.usefixtures("no_endpoint_variables")
def test_an_explicit_value_wins_over_the_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(environment.PULSAR_SERVICE_URL, "pulsar://broker.example:7650")
    monkeypatch.setenv(environment.PULSAR_ADMIN_URL, "http://admin.example:9080")
    monkeypatch.setenv(environment.ETCD_ENDPOINTS, "e1:2379")
    assert PulsarConfig(service_url="pulsar://other:6650").service_url == "pulsar://other:6650"
    assert TsoConfig(etcd=EtcdConfig(("other:2379",))).etcd.endpoints == ("other:2379",)
    # the variable's admin API is its broker's: another broker's is derived, never it
    assert admin_url_for("pulsar://other:6650") == "http://other:8080"
    assert admin_url_for("pulsar://other:7777") is None
    path = tmp_path / "node.yaml"
    path.write_text("pulsar:\n  service_url: pulsar://file:6650\netcd:\n  endpoints: [file:2379]\n")
    node = load_config(path)
    assert node.pulsar.service_url == "pulsar://file:6650"
    assert node.etcd.endpoints == ("file:2379",)
    # the node's STREAMWAL_<SECTION>__<KEY> variables still override the file
    node = load_config(path, environ={"STREAMWAL_ETCD__ENDPOINTS": "over:2379"})
    assert node.etcd.endpoints == ("over:2379",)


def test_serve_with_no_file_targets_the_standard_ports() -> None:
    """What ``streamwal serve`` with no file would run with (``config show`` takes the
    same options through the same loader), in a process without the variables."""
    env = {k: v for k, v in os.environ.items() if k not in _VARIABLES}
    argv = [sys.executable, "-m", "streamwal.cli", "config", "show", "--format", "json"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    values = {row["key"]: row["value"] for row in json.loads(out.stdout)}
    assert values["pulsar.service_url"] == "pulsar://127.0.0.1:6650"
    assert values["etcd.endpoints"] == ["127.0.0.1:2379"]
    assert values["pulsar.admin_url"] is None  # derived: 8080 beside 6650
    # and with the stack's variables, the stack's ports
    argv_env = {**env, **ports.environment()}
    out = subprocess.run(argv, env=argv_env, capture_output=True, text=True, check=True)
    values = {row["key"]: row["value"] for row in json.loads(out.stdout)}
    assert values["pulsar.service_url"] == ports.PULSAR_SERVICE_URL
    assert values["etcd.endpoints"] == [ports.ETCD_ENDPOINT]


def test_the_lab_hands_its_ports_on_without_overriding() -> None:
    environ = {environment.ETCD_ENDPOINTS: "mine:2379"}
    ports.export_environment(environ)
    assert environ == {**ports.environment(), environment.ETCD_ENDPOINTS: "mine:2379"}


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
    found = []
    for path in _files():
        if path.resolve() in DECLARING:
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
    assert found == [], "ports declared outside their module:\n" + "\n".join(found)


def test_stack_env_prints_the_exports(capsys: pytest.CaptureFixture[str]) -> None:
    from streamwal.cli import main

    assert main(["stack", "env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"export {name}={value}" for name, value in ports.environment().items()]
