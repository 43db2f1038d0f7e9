"""Configuration: every invalid field is named; secrets never show."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from node.config import ConfigError, load_config


def test_defaults_point_at_the_local_stack() -> None:
    config = load_config(environ={})
    assert config.pulsar.service_url == "pulsar://127.0.0.1:16650"
    assert config.etcd.endpoints == ("127.0.0.1:12379",)
    assert config.tso.mode == "in-process"


def test_file_then_environment_overrides(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("node:\n  id: 3\npulsar:\n  tenant: acme\nwal:\n  time_tick_interval_ms: 50\n")
    config = load_config(
        path, environ={"STREAMWAL_NODE__ID": "4", "STREAMWAL_ETCD__ENDPOINTS": "a:1,b:2"}
    )
    assert config.node.id == 4
    assert config.pulsar.tenant == "acme"
    assert config.wal.time_tick_interval_ms == 50
    assert config.etcd.endpoints == ("a:1", "b:2")


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("node:\n  id: seven\n", "node.id"),
        ("node:\n  id: -1\n", "node.id"),
        ("node:\n  listen: nowhere\n", "node.listen"),
        ("node:\n  metrics_listen: 'x:y'\n", "node.metrics_listen"),
        ("node:\n  shutdown_grace_s: 0\n", "node.shutdown_grace_s"),
        (
            "node:\n  tls:\n    cert_file: /no/such/cert.pem\n    key_file: /no/such/key.pem\n",
            "node.tls.cert_file",
        ),
        ("node:\n  colour: blue\n", "node.colour"),
        ("pulsar:\n  access_mode: Shared\n", "pulsar.access_mode"),
        ("pulsar:\n  service_url: http://127.0.0.1:8080\n", "pulsar.service_url"),
        ("pulsar:\n  service_url: pulsar://no-port\n", "pulsar.service_url (host 1)"),
        ("pulsar:\n  namespace: a/b\n", "pulsar.namespace"),
        ("pulsar:\n  operation_timeout_s: 0\n", "pulsar.operation_timeout_s"),
        ("pulsar:\n  operation_timeout_s: soon\n", "pulsar.operation_timeout_s"),
        ("pulsar:\n  tls_allow_insecure: maybe\n", "pulsar.tls_allow_insecure"),
        ("pulsar:\n  tls_trust_certs_file: /no/such/ca.pem\n", "pulsar.tls_trust_certs_file"),
        ("etcd:\n  endpoints: []\n", "etcd.endpoints"),
        ("etcd:\n  endpoints: ['host-without-port']\n", "etcd.endpoints[0]"),
        ("etcd:\n  user: root\n", "etcd.user"),
        ("tso:\n  mode: sideways\n", "tso.mode"),
        ("tso:\n  mode: remote\n", "tso.remote_addresses"),
        ("tso:\n  lease_ttl_s: 0\n", "tso.lease_ttl_s"),
        ("tso:\n  batch_size: 0\n", "tso.batch_size"),
        ("tso:\n  listen: 127.0.0.1:17002\n", "tso.listen"),  # served on node.listen
        ("tso:\n  tls:\n    server_name: node-1\n", "tso.tls.server_name"),
        ("tso:\n  tls:\n    ca_file: /no/such/ca.pem\n", "tso.tls.ca_file"),
        ("wal:\n  buffer_capacity_bytes: 0\n", "wal.buffer_capacity_bytes"),
        ("wal:\n  first_time_tick_max_ms: 1\n", "wal.first_time_tick_max_ms"),
        ("telemetry:\n  log_level: LOUD\n", "telemetry.log_level"),
        ("surprise:\n  a: 1\n", "surprise"),
        ("- just\n- a list\n", "config"),
    ],
)
def test_invalid_fields_are_named(tmp_path: Path, yaml_text: str, key: str) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert err.value.key == key
    assert str(err.value).startswith(f"{key}:")


def test_environment_errors_are_named_too() -> None:
    with pytest.raises(ConfigError, match=r"^wal\.append_retry_attempts:"):
        load_config(environ={"STREAMWAL_WAL__APPEND_RETRY_ATTEMPTS": "lots"})


def test_secrets_never_show(tmp_path: Path) -> None:
    config = load_config(
        environ={
            "STREAMWAL_PULSAR__AUTH_TOKEN": "tok-SECRET-123",
            "STREAMWAL_ETCD__USER": "root",
            "STREAMWAL_ETCD__PASSWORD": "pw-SECRET-456",
        }
    )
    assert config.pulsar.auth_token == "tok-SECRET-123"
    text = repr(config)
    assert "SECRET" not in text
    assert "<redacted>" in text
    path = tmp_path / "node.yaml"
    path.write_text("pulsar:\n  auth_token: tok-SECRET-789\n  access_mode: Nope\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert "SECRET" not in str(err.value)


def test_etcd_credentials_and_tls_reach_the_tso(tmp_path: Path) -> None:
    from node.runtime import tso_config

    ca = tmp_path / "ca.pem"
    ca.write_text("not checked here")
    config = load_config(
        environ={
            "STREAMWAL_ETCD__USER": "tso",
            "STREAMWAL_ETCD__PASSWORD": "pw-SECRET",
            "STREAMWAL_ETCD__TLS__CA_FILE": str(ca),
        }
    )
    tso = tso_config(config)
    assert (tso.etcd_user, tso.etcd_password, tso.etcd_ca_file) == ("tso", "pw-SECRET", str(ca))
    assert "SECRET" not in repr(tso)


def test_tso_client_tls_from_file_and_environment(tmp_path: Path) -> None:
    from node.runtime import client_tls

    pem = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca")}
    for path in pem.values():
        path.write_text("not checked here")
    node_yaml = tmp_path / "node.yaml"
    tls = {"cert_file": str(pem["cert"]), "key_file": str(pem["key"]), "ca_file": str(pem["ca"])}
    node_yaml.write_text(yaml.safe_dump({"node": {"tls": tls}}))
    # serving the in-process oracle over TLS but dialling it in plain text cannot work
    with pytest.raises(ConfigError) as err:
        load_config(node_yaml, environ={})
    assert err.value.key == "tso.tls"

    config = load_config(
        node_yaml,
        environ={
            "STREAMWAL_TSO__TLS__CA_FILE": str(pem["ca"]),
            "STREAMWAL_TSO__TLS__CERT_FILE": str(pem["cert"]),
            "STREAMWAL_TSO__TLS__KEY_FILE": str(pem["key"]),
            "STREAMWAL_TSO__TLS__SERVER_NAME": "tso.internal",
        },
    )
    client = client_tls(config.tso.tls)
    assert client is not None
    assert (client.ca_file, client.cert_file, client.key_file) == tuple(
        str(pem[n]) for n in ("ca", "cert", "key")
    )
    assert client.channel_options() == [("grpc.ssl_target_name_override", "tso.internal")]
    assert client_tls(load_config(environ={}).tso.tls) is None
