"""Configuration: every invalid field is named; secrets never show."""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from pathlib import Path

import pytest
import yaml

from streamwal.node.config import ConfigError, NodeConfig, load_config
from tests.node.processes import serve_once


def test_defaults_are_the_standard_local_endpoints() -> None:
    config = load_config(environ={})
    assert config.pulsar.service_url == "pulsar://127.0.0.1:6650"
    assert config.etcd.endpoints == ("127.0.0.1:2379",)
    assert config.tso.mode == "in-process"


def test_file_then_environment_overrides(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("node:\n  id: 3\npulsar:\n  tenant: acme\nwal:\n  time_tick_interval: 0.05\n")
    config = load_config(
        path, environ={"STREAMWAL_NODE__ID": "4", "STREAMWAL_ETCD__ENDPOINTS": "a:1,b:2"}
    )
    assert config.node.id == 4
    assert config.pulsar.tenant == "acme"
    assert config.wal.time_tick_interval == 0.05
    assert config.etcd.endpoints == ("a:1", "b:2")


_INVALID = [
    ("node:\n  id: seven\n", "node.id"),
    ("node:\n  id: -1\n", "node.id"),
    ("node:\n  listen: nowhere\n", "node.listen"),
    ("node:\n  metrics_listen: 'x:y'\n", "node.metrics_listen"),
    ("node:\n  advertise_address: node-1\n", "node.advertise_address"),
    ("node:\n  advertise_address: 0.0.0.0:17001\n", "node.advertise_address"),
    ("node:\n  advertise_address: node-1:0\n", "node.advertise_address"),
    # in-process candidates advertise themselves: a wildcard needs an address to advertise
    ("node:\n  listen: 0.0.0.0:17001\n", "node.advertise_address"),
    ("node:\n  listen: '[::]:17001'\n", "node.advertise_address"),
    ("node:\n  listen: ':::17001'\n", "node.advertise_address"),
    ("node:\n  shutdown_grace_s: 0\n", "node.shutdown_grace_s"),
    ("node:\n  shutdown_grace_s: .nan\n", "node.shutdown_grace_s"),
    ("node:\n  broker_lost_after_s: 0\n", "node.broker_lost_after_s"),
    ("node:\n  broker_lost_after_s: .nan\n", "node.broker_lost_after_s"),
    ("node:\n  log_format: xml\n", "node.log_format"),
    ("node:\n  log_dir: {a: b}\n", "node.log_dir"),
    ("node:\n  front: go\n", "node.front"),
    ("node:\n  front: native\n  tls: {cert_file: a, key_file: b}\n", "node.front"),
    ("node:\n  front_binary: [a]\n", "node.front_binary"),
    (
        "node:\n  tls:\n    cert_file: /no/such/cert.pem\n    key_file: /no/such/key.pem\n",
        "node.tls.cert_file",
    ),
    ("node:\n  tls:\n    ca_file: /no/such/ca.pem\n", "node.tls.ca_file"),
    ("node:\n  tls:\n    key_file: /no/such/key.pem\n", "node.tls.key_file"),
    ("node:\n  tls: on\n", "node.tls"),
    ("node:\n  colour: blue\n", "node.colour"),
    ("pulsar:\n  access_mode: Shared\n", "pulsar.access_mode"),
    ("pulsar:\n  admin_url: 127.0.0.1:8080\n", "pulsar.admin_url"),
    ("pulsar:\n  on_unsafe_policy: maybe\n", "pulsar.on_unsafe_policy"),
    ("pulsar:\n  on_no_deduplication: Refuse\n", "pulsar.on_no_deduplication"),
    ("pulsar:\n  cursor_subscription: a/b\n", "pulsar.cursor_subscription"),
    ("pulsar:\n  service_url: http://127.0.0.1:8080\n", "pulsar.service_url"),
    ("pulsar:\n  service_url: pulsar://no-port\n", "pulsar.service_url (host 1)"),
    ("pulsar:\n  tenant: ''\n", "pulsar.tenant"),
    ("pulsar:\n  namespace: a/b\n", "pulsar.namespace"),
    ("pulsar:\n  operation_timeout_s: 0\n", "pulsar.operation_timeout_s"),
    ("pulsar:\n  operation_timeout_s: soon\n", "pulsar.operation_timeout_s"),
    ("pulsar:\n  operation_timeout_s: .inf\n", "pulsar.operation_timeout_s"),
    ("pulsar:\n  operation_timeout_s: nan\n", "pulsar.operation_timeout_s"),
    ("pulsar:\n  auth_token: [a, b]\n", "pulsar.auth_token"),
    ("pulsar:\n  tls_allow_insecure: maybe\n", "pulsar.tls_allow_insecure"),
    ("pulsar:\n  tls_validate_hostname: 2\n", "pulsar.tls_validate_hostname"),
    ("pulsar:\n  tls_trust_certs_file: /no/such/ca.pem\n", "pulsar.tls_trust_certs_file"),
    (
        "pulsar:\n  service_url: pulsar+ssl://broker:6651\n"
        "  tls_trust_certs_file: /no/such/ca.pem\n",
        "pulsar.tls_trust_certs_file",
    ),
    ("pulsar:\n  client_log_file: {path: x}\n", "pulsar.client_log_file"),
    ("pulsar:\n  send_timeout_ms: -1\n", "pulsar.send_timeout_ms"),
    ("pulsar:\n  max_message_size: 0\n", "pulsar.max_message_size"),
    ("pulsar:\n  batching: often\n", "pulsar.batching"),
    ("pulsar:\n  batching_max_delay_ms: -1\n", "pulsar.batching_max_delay_ms"),
    ("pulsar:\n  max_pending_messages: 0\n", "pulsar.max_pending_messages"),
    ("pulsar:\n  writer_clients: -1\n", "pulsar.writer_clients"),
    ("pulsar:\n  verify_exclusivity: perhaps\n", "pulsar.verify_exclusivity"),
    ("etcd:\n  endpoints: []\n", "etcd.endpoints"),
    ("etcd:\n  endpoints: ['host-without-port']\n", "etcd.endpoints[0]"),
    ("etcd:\n  user: root\n", "etcd.user"),
    ("etcd:\n  password: pw\n", "etcd.user"),
    ("etcd:\n  password: {a: 1}\n", "etcd.password"),
    ("etcd:\n  tls:\n    ca_file: /no/such/ca.pem\n", "etcd.tls.ca_file"),
    (
        "etcd:\n  tls:\n    cert_file: /no/such/cert.pem\n    key_file: /no/such/key.pem\n",
        "etcd.tls.cert_file",
    ),
    ("etcd:\n  tls:\n    key_file: /no/such/key.pem\n", "etcd.tls.key_file"),
    ("etcd:\n  tls:\n    colour: blue\n", "etcd.tls.colour"),
    ("tso:\n  mode: sideways\n", "tso.mode"),
    ("tso:\n  mode: remote\n", "tso.remote_addresses"),
    ("tso:\n  remote_addresses: [tso-without-port]\n", "tso.remote_addresses[0]"),
    ("tso:\n  listen: 127.0.0.1:17002\n", "tso.listen"),  # served on node.listen
    ("tso:\n  tls:\n    server_name: node-1\n", "tso.tls.server_name"),
    ("tso:\n  tls:\n    ca_file: /no/such/ca.pem\n", "tso.tls.ca_file"),
    (
        "tso:\n  tls:\n    cert_file: /no/such/cert.pem\n    key_file: /no/such/key.pem\n",
        "tso.tls.cert_file",
    ),
    ("tso:\n  tls:\n    key_file: /no/such/key.pem\n", "tso.tls.key_file"),
    ("tso:\n  key_prefix: ''\n", "tso.key_prefix"),
    ("tso:\n  key_prefix: /\n", "tso.key_prefix"),
    ("tso:\n  key_prefix: streamwal\n", "tso.key_prefix"),
    ("tso:\n  key_prefix: /a b\n", "tso.key_prefix"),
    ("tso:\n  key_prefix: /prod/\n", "tso.key_prefix"),
    ("tso:\n  lease_ttl_s: 0\n", "tso.lease_ttl_s"),
    ("tso:\n  lease_ttl_s: 1.5\n", "tso.lease_ttl_s"),
    ("tso:\n  save_window_s: 0\n", "tso.save_window_s"),
    ("tso:\n  save_window_s: .nan\n", "tso.save_window_s"),
    ("tso:\n  save_window_s: 0.04\n  update_interval_s: 0.05\n", "tso.save_window_s"),
    ("tso:\n  update_interval_s: 0\n", "tso.update_interval_s"),
    ("tso:\n  batch_size: 0\n", "tso.batch_size"),
    ("tso:\n  batch_size: 262144\n", "tso.batch_size"),
    ("wal:\n  buffer_capacity_bytes: 0\n", "wal.buffer_capacity_bytes"),
    ("wal:\n  max_message_bytes: 0\n", "wal.max_message_bytes"),
    ("wal:\n  pack_appends: sometimes\n", "wal.pack_appends"),
    ("wal:\n  log_format: v3\n", "wal.log_format"),
    ("wal:\n  buffer_keepalive: .nan\n", "wal.buffer_keepalive"),
    ("wal:\n  buffer_keepalive: -.inf\n", "wal.buffer_keepalive"),
    ("wal:\n  time_tick_interval: 0\n", "wal.time_tick_interval"),
    ("wal:\n  retention: -1\n", "wal.retention"),
    ("wal:\n  retention: forever\n", "wal.retention"),
    ("wal:\n  truncate_interval: 0\n", "wal.truncate_interval"),
    ("wal:\n  idempotence_window: 0\n", "wal.idempotence_window"),
    ("wal:\n  idempotence_producers: -1\n", "wal.idempotence_producers"),
    ("wal:\n  idempotence_rebuild_window: 0\n", "wal.idempotence_rebuild_window"),
    ("wal:\n  idempotence_rebuild_timeout: 0\n", "wal.idempotence_rebuild_timeout"),
    ("wal:\n  txn_keepalive: -2\n", "wal.txn_keepalive"),
    (
        "wal:\n  first_time_tick_backoff:\n    initial: -0.005\n",
        "wal.first_time_tick_backoff.initial",
    ),
    (
        "wal:\n  first_time_tick_backoff:\n    maximum: 0.001\n",
        "wal.first_time_tick_backoff.maximum",
    ),
    (
        "wal:\n  first_time_tick_backoff:\n    max_attempts: 0\n",
        "wal.first_time_tick_backoff.max_attempts",
    ),
    (
        "wal:\n  first_time_tick_backoff:\n    multiplier: 0.5\n",
        "wal.first_time_tick_backoff.multiplier",
    ),
    (
        "wal:\n  first_time_tick_backoff:\n    multiplier: .inf\n",
        "wal.first_time_tick_backoff.multiplier",
    ),
    ("wal:\n  append_backoff:\n    initial: 0\n", "wal.append_backoff.initial"),
    ("wal:\n  append_backoff:\n    maximum: 0.001\n", "wal.append_backoff.maximum"),
    ("wal:\n  append_backoff:\n    max_attempts: 0\n", "wal.append_backoff.max_attempts"),
    ("wal:\n  append_backoff:\n    multiplier: 0.9\n", "wal.append_backoff.multiplier"),
    ("wal:\n  scanner_backoff:\n    initial: 0\n", "wal.scanner_backoff.initial"),
    ("wal:\n  scanner_backoff:\n    maximum: 0.01\n", "wal.scanner_backoff.maximum"),
    ("wal:\n  scanner_backoff:\n    multiplier: -2\n", "wal.scanner_backoff.multiplier"),
    ("wal:\n  scanner_backoff:\n    max_attempts: many\n", "wal.scanner_backoff.max_attempts"),
    ("wal:\n  close_timeout: 0\n", "wal.close_timeout"),
    ("wal:\n  first_time_tick_backoff: 5\n", "wal.first_time_tick_backoff"),
    ("telemetry:\n  service_name: ''\n", "telemetry.service_name"),
    ("telemetry:\n  service_name: '  '\n", "telemetry.service_name"),
    ("telemetry:\n  otlp_endpoint: collector\n", "telemetry.otlp_endpoint"),
    ("telemetry:\n  otlp_endpoint: collector:4317\n", "telemetry.otlp_endpoint"),  # TLS or not?
    ("telemetry:\n  otlp_endpoint: grpc://collector:4317\n", "telemetry.otlp_endpoint"),
    ("telemetry:\n  otlp_endpoint: http://collector\n", "telemetry.otlp_endpoint"),
    (
        "telemetry:\n  otlp_endpoint: http://collector:4318/v1/traces\n",
        "telemetry.otlp_endpoint",
    ),
    ("telemetry:\n  tracing: sometimes\n", "telemetry.tracing"),
    ("telemetry:\n  log_level: LOUD\n", "telemetry.log_level"),
    ("tracing:\n  sampler: sometimes\n", "tracing.sampler"),
    ("tracing:\n  ratio: 1.5\n", "tracing.ratio"),
    ("cluster:\n  enabled: maybe\n", "cluster.enabled"),
    ("cluster:\n  key_prefix: streamwal/\n", "cluster.key_prefix"),
    ("cluster:\n  lease_ttl_s: 0\n", "cluster.lease_ttl_s"),
    ("cluster:\n  grace_period_s: -1\n", "cluster.grace_period_s"),
    ("cluster:\n  balancer: often\n", "cluster.balancer"),
    ("cluster:\n  channels: ['ok', 'not ok']\n", "cluster.channels[1]"),
    ("cluster:\n  max_moves_per_round: 0\n", "cluster.max_moves_per_round"),
    ("cluster:\n  round_interval_s: 0\n", "cluster.round_interval_s"),
    ("cluster:\n  poll_interval_s: -0.1\n", "cluster.poll_interval_s"),
    ("cluster:\n  open_failure_bound_s: 0\n", "cluster.open_failure_bound_s"),
    ("cluster:\n  probe_interval_s: 0\n", "cluster.probe_interval_s"),
    ("cluster:\n  probe_refusals: -1\n", "cluster.probe_refusals"),
    (
        "node:\n  listen: 0.0.0.0:7000\ntso:\n  mode: remote\n  remote_addresses: [h:1]\n"
        "cluster:\n  enabled: true\n",
        "node.advertise_address",
    ),
    ("auth:\n  enabled: maybe\n", "auth.enabled"),
    ("auth:\n  insecure: maybe\n", "auth.insecure"),
    ("auth:\n  enabled: true\n", "auth.identities"),
    ("auth:\n  identities: [{name: a, roles: [root], token_env: T}]\n", "auth.identities[0].roles"),
    ("auth:\n  peer_token_file: /no/such/token\n", "auth.peer_token_file"),
    ("auth:\n  peer_token_env: {a: b}\n", "auth.peer_token_env"),
    ("surprise:\n  a: 1\n", "surprise"),
    ("- just\n- a list\n", "config"),
]


@pytest.mark.parametrize(("yaml_text", "key"), _INVALID)
def test_invalid_fields_are_named(tmp_path: Path, yaml_text: str, key: str) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert err.value.key == key
    assert str(err.value).startswith(f"{key}:")


def _leaf_keys(cls: type, prefix: str) -> set[str]:
    keys: set[str] = set()
    for f in dataclasses.fields(cls):
        if not f.init:  # derived, not a key a file can set
            continue
        hint = typing.get_type_hints(cls)[f.name]
        name = f"{prefix}.{f.name}" if prefix else f.name
        nested = isinstance(hint, type) and dataclasses.is_dataclass(hint)
        keys |= _leaf_keys(hint, name) if nested else {name}
    return keys


def test_every_key_has_an_invalid_case() -> None:
    # "pulsar.service_url (host 1)" and "etcd.endpoints[0]" count for their key.
    covered = {re.sub(r" \(.*\)$|\[\d+\]$", "", key) for _, key in _INVALID}
    assert _leaf_keys(NodeConfig, "") - covered == set()


@pytest.mark.parametrize(
    "yaml_text",
    [
        "telemetry:\n  otlp_endpoint: ''\n",  # empty: no export
        "telemetry:\n  otlp_endpoint: http://127.0.0.1:4317\n",
        "telemetry:\n  otlp_endpoint: https://collector.example:4317/\n",
        "pulsar:\n  service_url: pulsar+ssl://broker:6651\n",  # system CAs
        "tso:\n  key_prefix: /prod-a/cluster-1\n",
        "node:\n  listen: 0.0.0.0:17001\n  advertise_address: node-1.example:17001\n",
        "node:\n  listen: '[::1]:17001'\n",  # a concrete IPv6 host advertises itself
        # a remote-TSO node advertises nothing: it may listen on every interface
        "node:\n  listen: 0.0.0.0:17001\ntso:\n  mode: remote\n  remote_addresses: [tso:17001]\n",
    ],
)
def test_valid_edge_values_load(tmp_path: Path, yaml_text: str) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(yaml_text)
    load_config(path, environ={})


def test_a_pulsar_trust_file_needs_pulsar_ssl(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not parsed here")
    env = {"STREAMWAL_PULSAR__TLS_TRUST_CERTS_FILE": str(ca)}
    with pytest.raises(ConfigError) as err:
        load_config(environ=env)
    assert err.value.key == "pulsar.tls_trust_certs_file"
    assert "pulsar+ssl://" in str(err.value)
    env["STREAMWAL_PULSAR__SERVICE_URL"] = "pulsar+ssl://broker:6651"
    assert load_config(environ=env).pulsar.tls_trust_certs_file == str(ca)


def test_an_etcd_client_certificate_needs_a_ca(tmp_path: Path) -> None:
    for name in ("cert.pem", "key.pem"):
        (tmp_path / name).write_text("not parsed here")
    env = {
        "STREAMWAL_ETCD__TLS__CERT_FILE": str(tmp_path / "cert.pem"),
        "STREAMWAL_ETCD__TLS__KEY_FILE": str(tmp_path / "key.pem"),
    }
    with pytest.raises(ConfigError) as err:
        load_config(environ=env)
    assert err.value.key == "etcd.tls.ca_file"


@pytest.mark.parametrize(
    ("variable", "problem"),
    [
        ("STREAMWAL_BOGUS__X", "unknown section 'bogus'"),
        ("STREAMWAL_NODE__COLOUR", "unknown key 'colour' in node"),
        ("STREAMWAL_ETCD__TLS__CA", "unknown key 'ca' in etcd.tls"),
        ("STREAMWAL_NODE__TLS", "node.tls is a section"),
        ("STREAMWAL_NODE__ID__X", "node.id has no sub-keys"),
    ],
)
def test_unknown_environment_variables_are_named(variable: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(environ={variable: "1"})
    assert err.value.key == variable
    assert str(err.value).startswith(f"{variable}: {problem}")


def test_other_streamwal_variables_are_not_configuration() -> None:
    config = load_config(environ={"STREAMWAL_CACHE_DIR": "x", "STREAMWAL_SLOW": "1"})
    assert config == load_config(environ={})


def test_serve_with_a_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("wal:\n  buffer_keepalive: .nan\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWAL_")}
    done = serve_once(path, env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "invalid configuration: wal.buffer_keepalive:" in done.stderr
    assert "ready" not in done.stdout


def test_environment_errors_are_named_too() -> None:
    with pytest.raises(ConfigError, match=r"^wal\.append_backoff\.max_attempts:"):
        load_config(environ={"STREAMWAL_WAL__APPEND_BACKOFF__MAX_ATTEMPTS": "lots"})


def test_first_time_tick_attempts_bound_the_open() -> None:
    unbounded = load_config(environ={}).wal
    assert unbounded.first_time_tick_backoff.max_attempts is None
    env = {"STREAMWAL_WAL__FIRST_TIME_TICK_BACKOFF__MAX_ATTEMPTS": "4"}
    bounded = load_config(environ=env).wal
    assert bounded.first_time_tick_backoff.max_attempts == 4
    # the other fields of the backoff keep their defaults
    assert bounded.first_time_tick_backoff.initial == unbounded.first_time_tick_backoff.initial


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
    from streamwal.node.config import tso_config

    ca = tmp_path / "ca.pem"
    ca.write_text("not checked here")
    config = load_config(
        environ={
            "STREAMWAL_ETCD__USER": "tso",
            "STREAMWAL_ETCD__PASSWORD": "pw-SECRET",
            "STREAMWAL_ETCD__TLS__CA_FILE": str(ca),
        }
    )
    tso = tso_config(config.etcd, config.tso)
    assert (tso.etcd.user, tso.etcd.password, tso.etcd.tls.ca_file) == ("tso", "pw-SECRET", str(ca))
    assert "SECRET" not in repr(tso)


def test_tso_client_tls_from_file_and_environment(tmp_path: Path) -> None:
    from streamwal.server.runtime import client_tls

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


def test_in_process_tls_must_fit_both_ends(tmp_path: Path) -> None:
    """A candidate that does not lead dials the oracle with tso.tls; the oracle is
    served with node.tls. Settings that only work on the leader are refused."""
    pem = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca")}
    for path in pem.values():
        path.write_text("not checked here")
    dial_ca = {"STREAMWAL_TSO__TLS__CA_FILE": str(pem["ca"])}
    with pytest.raises(ConfigError) as err:  # TLS dial, plain-text oracle
        load_config(environ=dial_ca)
    assert err.value.key == "tso.tls"
    serve_mtls = {
        "STREAMWAL_NODE__TLS__CERT_FILE": str(pem["cert"]),
        "STREAMWAL_NODE__TLS__KEY_FILE": str(pem["key"]),
        "STREAMWAL_NODE__TLS__CA_FILE": str(pem["ca"]),
    }
    with pytest.raises(ConfigError) as err:  # client certificates required, none given
        load_config(environ={**serve_mtls, **dial_ca})
    assert err.value.key == "tso.tls.cert_file"
    dial_cert = {
        "STREAMWAL_TSO__TLS__CERT_FILE": str(pem["cert"]),
        "STREAMWAL_TSO__TLS__KEY_FILE": str(pem["key"]),
    }
    assert load_config(environ={**serve_mtls, **dial_ca, **dial_cert}).tso.tls.enabled
    # a remote node serves no oracle: its tso.tls only has to dial the remote one
    remote = {"STREAMWAL_TSO__MODE": "remote", "STREAMWAL_TSO__REMOTE_ADDRESSES": "tso:1"}
    assert load_config(environ={**remote, **dial_ca}).tso.tls.ca_file == str(pem["ca"])


def test_a_wildcard_listen_needs_an_advertise_address() -> None:
    env = {"STREAMWAL_NODE__LISTEN": "10.0.0.7:17001"}
    assert load_config(environ=env).node.advertise_address == ""
    env["STREAMWAL_NODE__LISTEN"] = "0.0.0.0:17001"
    with pytest.raises(ConfigError) as err:
        load_config(environ=env)
    assert "0.0.0.0:17001" in str(err.value)
    env["STREAMWAL_NODE__ADVERTISE_ADDRESS"] = "10.0.0.7:17001"
    assert load_config(environ=env).node.advertise_address == "10.0.0.7:17001"


def test_the_node_sections_are_the_library_configs() -> None:
    """Each knob is declared once: the node's ``pulsar:``, ``etcd:`` and ``wal:`` sections
    are the library's objects, and its ``tso:`` section the oracle's own settings."""
    from streamwal.adaptors.pulsar.config import PulsarConfig
    from streamwal.tso.config import EtcdConfig, OracleSettings, TsoConfig
    from streamwal.wal.config import WALConfig

    hints = typing.get_type_hints(NodeConfig)
    assert (hints["pulsar"], hints["etcd"], hints["wal"]) == (PulsarConfig, EtcdConfig, WALConfig)
    assert issubclass(hints["tso"], OracleSettings)
    assert typing.get_type_hints(TsoConfig)["etcd"] is EtcdConfig
