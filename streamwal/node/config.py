"""The node's configuration: YAML file, then environment overrides, then defaults.

Every key has a default that points at the local stack, so ``streamwal serve`` with
no file runs against ``streamwal stack up``. An environment variable
``STREAMWAL_<SECTION>__<KEY>`` (for example ``STREAMWAL_PULSAR__AUTH_TOKEN``)
overrides the file. Any invalid or unknown key raises :class:`ConfigError` naming it
(``pulsar.service_url: ...``), and so does a ``STREAMWAL_*__*`` variable that names no
key (``STREAMWAL_PULSAR__SERVICE_ULR: ...``). Secrets (Pulsar token, etcd password) never appear in
``repr`` or in error messages.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
import yaml

from streamwal.tso.timestamp import MAX_LOGICAL
from streamwal.errors import InvalidInputError

__all__ = [
    "ClientTLSFiles",
    "ConfigError",
    "EtcdSettings",
    "NodeConfig",
    "NodeSettings",
    "PulsarSettings",
    "TSOSettings",
    "TelemetrySettings",
    "WALSettings",
    "load_config",
]

ENV_PREFIX = "STREAMWAL_"
SECRET_KEYS = frozenset({"auth_token", "password"})


class ConfigError(InvalidInputError):
    """A configuration value is invalid; ``key`` is its dotted name."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        super().__init__(f"{key}: {problem}")


def _redact(cls: type) -> type:
    def __repr__(self: Any) -> str:
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            shown = "<redacted>" if f.name in SECRET_KEYS and value else repr(value)
            parts.append(f"{f.name}={shown}")
        return f"{type(self).__name__}({', '.join(parts)})"

    cls.__repr__ = __repr__  # type: ignore[method-assign,assignment]
    return cls


def _host_port(key: str, value: str) -> None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(key, f"expected host:port, got {value!r}")


#: hosts that bind every interface: nobody can dial them to reach this node
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


def _is_wildcard(address: str) -> bool:
    return address.rpartition(":")[0] in _WILDCARD_HOSTS


def _otlp_url(key: str, value: str) -> None:
    """``http(s)://host:port``: what the OTLP gRPC exporter can dial.

    The exporter keeps only the network location and the scheme picks TLS: without a
    scheme it would use TLS (the OpenTelemetry default), which a plain-text collector
    refuses, and a path, another scheme or a missing port would only show up as an
    export failing later. So the scheme is required.
    """
    scheme, sep, address = value.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise ConfigError(
            key,
            f"expected http://host:port (plain text) or https://host:port (TLS), got {value!r}",
        )
    if "/" in address.rstrip("/"):
        raise ConfigError(key, f"expected http(s)://host:port without a path, got {value!r}")
    _host_port(key, address.rstrip("/"))


def _non_empty(key: str, value: str) -> None:
    if not value.strip():
        raise ConfigError(key, "must not be empty")


@dataclass(frozen=True)
class TLSFiles:
    """PEM files; all optional. A server needs cert+key; a client may need only a CA."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def check(self, key: str, *, server: bool) -> None:
        for name in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{key}.{name}", f"no such file: {path}")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(key, "cert_file and key_file go together")
        if server and self.enabled and self.cert_file is None:
            raise ConfigError(key, "a server needs cert_file and key_file")

    @property
    def enabled(self) -> bool:
        return any((self.ca_file, self.cert_file, self.key_file))


@dataclass(frozen=True)
class ClientTLSFiles(TLSFiles):
    """How this node dials other nodes' gRPC services (the TSO): the CA it trusts,
    its client certificate when they require one, and optionally the name their
    certificates carry when it differs from the dialled host."""

    server_name: str | None = None

    def check(self, key: str, *, server: bool = False) -> None:
        super().check(key, server=False)
        if self.server_name is not None and not self.enabled:
            raise ConfigError(f"{key}.server_name", "needs TLS: set ca_file (or cert_file)")


@dataclass(frozen=True)
class NodeSettings:
    id: int = 1
    listen: str = "127.0.0.1:17001"
    #: host:port other nodes dial to reach this one; a leading in-process oracle
    #: publishes it in etcd for the other candidates. Empty: ``listen`` with the
    #: bound port, so ``listen`` must then name a concrete host, not 0.0.0.0
    advertise_address: str = ""
    #: Prometheus /metrics; empty disables it
    metrics_listen: str = "127.0.0.1:9464"
    tls: TLSFiles = field(default_factory=TLSFiles)
    #: how long SIGTERM waits for in-flight appends before closing channels
    shutdown_grace_s: float = 10.0

    def check(self) -> None:
        if self.id < 0:
            raise ConfigError("node.id", f"must be >= 0, got {self.id}")
        _host_port("node.listen", self.listen)
        if self.advertise_address:
            _host_port("node.advertise_address", self.advertise_address)
            host, _, port = self.advertise_address.rpartition(":")
            if host in _WILDCARD_HOSTS or int(port) == 0:
                raise ConfigError(
                    "node.advertise_address",
                    f"must be a host and port other nodes can dial, got {self.advertise_address!r}",
                )
        if self.metrics_listen:
            _host_port("node.metrics_listen", self.metrics_listen)
        if self.shutdown_grace_s <= 0:
            raise ConfigError("node.shutdown_grace_s", "must be > 0")
        self.tls.check("node.tls", server=True)


def _default_client_log() -> str:
    return str(platformdirs.user_log_path("streamwal") / "pulsar-client.log")


@_redact
@dataclass(frozen=True, repr=False)
class PulsarSettings:
    service_url: str = "pulsar://127.0.0.1:16650"
    tenant: str = "public"
    namespace: str = "default"
    access_mode: str = "ExclusiveWithFencing"
    operation_timeout_s: float = 10.0
    #: the broker's admin API (policy checks at open); "": derived from service_url
    #: for Pulsar's standard ports and the local stack's, else not checked
    admin_url: str = ""
    #: refuse | warn | ignore: a TTL, an evicting backlog quota, or a deleted cursor
    on_unsafe_policy: str = "refuse"
    #: refuse | warn | ignore: broker deduplication off for the namespace or topic
    on_no_deduplication: str = "refuse"
    auth_token: str | None = None
    tls_trust_certs_file: str | None = None
    tls_allow_insecure: bool = False
    tls_validate_hostname: bool = False
    #: the C++ client's own log (its warnings and errors, written natively); "": through
    #: Python logging instead, at a cost (see ``PulsarConfig.client_log_file``)
    client_log_file: str = field(default_factory=_default_client_log)

    def check(self) -> None:
        scheme, sep, address = self.service_url.partition("://")
        if scheme not in ("pulsar", "pulsar+ssl") or not sep:
            raise ConfigError(
                "pulsar.service_url",
                f"must start with pulsar:// or pulsar+ssl://, got {self.service_url!r}",
            )
        for i, host_port in enumerate(address.rstrip("/").split(",")):
            _host_port(f"pulsar.service_url (host {i + 1})", host_port)
        for name in ("tenant", "namespace"):
            value = getattr(self, name)
            if not value or "/" in value:
                raise ConfigError(f"pulsar.{name}", f"must be a non-empty name, got {value!r}")
        if self.operation_timeout_s <= 0:
            raise ConfigError("pulsar.operation_timeout_s", "must be > 0")
        if self.access_mode not in ("ExclusiveWithFencing", "Exclusive"):
            raise ConfigError(
                "pulsar.access_mode",
                f"must be ExclusiveWithFencing or Exclusive, got {self.access_mode!r}",
            )
        if self.admin_url and not self.admin_url.startswith(("http://", "https://")):
            raise ConfigError(
                "pulsar.admin_url", f"must start with http:// or https://, got {self.admin_url!r}"
            )
        for name in ("on_unsafe_policy", "on_no_deduplication"):
            if getattr(self, name) not in ("refuse", "warn", "ignore"):
                raise ConfigError(
                    f"pulsar.{name}", f"must be refuse, warn or ignore, got {getattr(self, name)!r}"
                )
        # pulsar+ssl:// without a trust file is fine: the client then verifies the broker
        # against the system CAs. A private CA needs the file, and the client would only
        # log a missing one once it connects; a trust file on plain pulsar:// does nothing.
        if self.tls_trust_certs_file and not Path(self.tls_trust_certs_file).is_file():
            raise ConfigError(
                "pulsar.tls_trust_certs_file", f"no such file: {self.tls_trust_certs_file}"
            )
        if self.tls_trust_certs_file and scheme != "pulsar+ssl":
            raise ConfigError(
                "pulsar.tls_trust_certs_file", "set, but service_url is not pulsar+ssl://"
            )


@_redact
@dataclass(frozen=True, repr=False)
class EtcdSettings:
    endpoints: tuple[str, ...] = ("127.0.0.1:12379",)
    user: str | None = None
    password: str | None = None
    tls: TLSFiles = field(default_factory=TLSFiles)

    def check(self) -> None:
        if not self.endpoints:
            raise ConfigError("etcd.endpoints", "at least one endpoint is needed")
        for i, endpoint in enumerate(self.endpoints):
            text = endpoint.split("://", 1)[-1].rstrip("/")
            _host_port(f"etcd.endpoints[{i}]", text)
        if (self.user is None) != (self.password is None):
            raise ConfigError("etcd.user", "user and password go together")
        self.tls.check("etcd.tls", server=False)
        if self.tls.cert_file is not None and self.tls.ca_file is None:
            raise ConfigError("etcd.tls.ca_file", "a client certificate needs a CA file")


@dataclass(frozen=True)
class TSOSettings:
    #: ``in-process``: this node campaigns for the oracle on etcd and serves it;
    #: ``remote``: it asks the oracle's gRPC service at ``remote_addresses``.
    mode: str = "in-process"
    remote_addresses: tuple[str, ...] = ()
    #: TLS for dialling TSO services: the oracle nodes in remote mode, and this
    #: node's own and its peers' services in in-process mode (a non-leader follows
    #: the leader through them); unset: plain text
    tls: ClientTLSFiles = field(default_factory=ClientTLSFiles)
    key_prefix: str = "/streamwal"
    lease_ttl_s: int = 3
    save_window_s: float = 3.0
    update_interval_ms: int = 50
    batch_size: int = 1000

    def check(self) -> None:
        if self.mode not in ("in-process", "remote"):
            raise ConfigError("tso.mode", f"must be in-process or remote, got {self.mode!r}")
        if self.mode == "remote" and not self.remote_addresses:
            raise ConfigError("tso.remote_addresses", "remote mode needs at least one address")
        for i, address in enumerate(self.remote_addresses):
            _host_port(f"tso.remote_addresses[{i}]", address)
        # The literal etcd prefix: the oracle's keys are <key_prefix>/tso/...
        prefix = self.key_prefix
        if not prefix.startswith("/") or prefix.endswith("/") or any(c.isspace() for c in prefix):
            raise ConfigError(
                "tso.key_prefix", f"expected a path like /streamwal (no trailing /), got {prefix!r}"
            )
        self.tls.check("tso.tls")
        if self.lease_ttl_s < 1:
            raise ConfigError("tso.lease_ttl_s", "must be >= 1")
        if self.update_interval_ms <= 0:
            raise ConfigError("tso.update_interval_ms", "must be > 0")
        if self.save_window_s * 1000 <= max(self.update_interval_ms, 1):
            raise ConfigError("tso.save_window_s", "must exceed tso.update_interval_ms (and 1 ms)")
        if not 1 <= self.batch_size < MAX_LOGICAL:
            raise ConfigError("tso.batch_size", f"must be in [1, {MAX_LOGICAL})")


@dataclass(frozen=True)
class WALSettings:
    buffer_capacity_bytes: int = 64 * 1024 * 1024
    buffer_keepalive_s: float = 30.0
    time_tick_interval_ms: int = 200
    first_time_tick_initial_ms: int = 20
    first_time_tick_max_ms: int = 5000
    first_time_tick_multiplier: float = 2.0
    #: attempts at the first time tick before an open gives up (AssignChannel then
    #: answers UNAVAILABLE); 0: no limit, the open ends only when the caller gives up
    first_time_tick_attempts: int = 0
    append_retry_initial_ms: int = 10
    append_retry_max_ms: int = 5000
    append_retry_attempts: int = 10

    def check(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value <= 0 and f.name != "first_time_tick_attempts":
                raise ConfigError(f"wal.{f.name}", f"must be > 0, got {value}")
        if self.first_time_tick_attempts < 0:
            raise ConfigError(
                "wal.first_time_tick_attempts",
                f"must be >= 0 (0: no limit), got {self.first_time_tick_attempts}",
            )
        if self.first_time_tick_max_ms < self.first_time_tick_initial_ms:
            raise ConfigError("wal.first_time_tick_max_ms", "must be >= first_time_tick_initial_ms")
        if self.first_time_tick_multiplier < 1:
            raise ConfigError("wal.first_time_tick_multiplier", "must be >= 1")
        if self.append_retry_max_ms < self.append_retry_initial_ms:
            raise ConfigError("wal.append_retry_max_ms", "must be >= append_retry_initial_ms")


@dataclass(frozen=True)
class TelemetrySettings:
    #: ``OTEL_SERVICE_NAME`` wins when set
    service_name: str = "streamwal"
    #: ``OTEL_EXPORTER_OTLP_ENDPOINT`` wins when set; empty and unset: no export.
    #: ``http://host:4317`` is plain text; ``https://`` or no scheme is TLS (see
    #: streamwal/node/telemetry.py for the standard variables that configure it)
    otlp_endpoint: str = ""
    tracing: bool = True
    log_level: str = "INFO"

    def check(self) -> None:
        _non_empty("telemetry.service_name", self.service_name)
        if self.otlp_endpoint:
            _otlp_url("telemetry.otlp_endpoint", self.otlp_endpoint)
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError("telemetry.log_level", f"unknown level {self.log_level!r}")


@dataclass(frozen=True)
class NodeConfig:
    node: NodeSettings = field(default_factory=NodeSettings)
    pulsar: PulsarSettings = field(default_factory=PulsarSettings)
    etcd: EtcdSettings = field(default_factory=EtcdSettings)
    tso: TSOSettings = field(default_factory=TSOSettings)
    wal: WALSettings = field(default_factory=WALSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            getattr(self, f.name).check()
        if self.tso.mode == "in-process":
            self._check_in_process_tls()
        if (
            self.tso.mode == "in-process"
            and not self.node.advertise_address
            and _is_wildcard(self.node.listen)
        ):
            # every in-process candidate may lead, and the leader publishes its address
            # for the others to dial: a wildcard would send them to themselves
            raise ConfigError(
                "node.advertise_address",
                f"node.listen {self.node.listen!r} binds every interface, so the in-process "
                "oracle cannot advertise it: set the host:port other nodes reach this node at",
            )

    def _check_in_process_tls(self) -> None:
        """The oracle is served on ``node.listen`` with ``node.tls``, and a candidate that
        does not lead asks it (and its peers, configured alike) for timestamps with
        ``tso.tls``: the two must fit, or only the leader ever gets a timestamp."""
        served, dialled = self.node.tls, self.tso.tls
        if served.enabled and not dialled.enabled:
            raise ConfigError(
                "tso.tls", "node.tls serves the in-process oracle over TLS: set tso.tls.ca_file"
            )
        if dialled.enabled and not served.enabled:
            raise ConfigError(
                "tso.tls",
                "the in-process oracle is served in plain text (node.tls is not set): "
                "leave tso.tls unset or set node.tls",
            )
        if served.ca_file is not None and dialled.cert_file is None:
            raise ConfigError(
                "tso.tls.cert_file",
                "node.tls.ca_file makes the oracle require client certificates: "
                "set tso.tls.cert_file and tso.tls.key_file",
            )


# ---- loading --------------------------------------------------------------------------


def _coerce(key: str, hint: Any, value: Any) -> Any:
    """Turn YAML or environment text into the field's type, or say which key is wrong."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(key, inner[0], value)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
        return _build(key, hint, value)  # type: ignore[arg-type]
    if origin is tuple:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(key, f"expected a list, got {type(value).__name__}")
        return tuple(_coerce(f"{key}[{i}]", args[0], v) for i, v in enumerate(value))
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise ConfigError(key, f"expected true or false, got {value!r}")
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        try:
            return int(str(value), 10)
        except ValueError:
            raise ConfigError(key, f"expected an integer, got {value!r}") from None
    if hint is float:
        if isinstance(value, bool):
            raise ConfigError(key, f"expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(key, f"expected a number, got {value!r}") from None
        if not math.isfinite(number):  # NaN passes every `<= 0` check after this
            raise ConfigError(key, f"expected a finite number, got {value!r}")
        return number
    if hint is str:
        if isinstance(value, dict | list):
            raise ConfigError(key, f"expected text, got {type(value).__name__}")
        return str(value)
    return value


def _build(prefix: str, cls: type, data: Mapping[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise ConfigError(where, f"unknown key (known: {', '.join(sorted(names))})")
    kwargs = {
        name: _coerce(f"{prefix}.{name}" if prefix else name, hints[name], value)
        for name, value in data.items()
    }
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(prefix or "config", str(exc)) from None


def _check_env_path(variable: str, parts: list[str]) -> None:
    """Every part names a field, and the last one a value, not a section.

    A typo in a variable name would otherwise leave the default in place without a
    word; the error names the variable, as the YAML loader names an unknown key.
    """
    cls: Any = NodeConfig
    for depth, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            what = f"key {part!r} in {'.'.join(parts[:depth])}" if depth else f"section {part!r}"
            raise ConfigError(variable, f"unknown {what} (known: {', '.join(sorted(fields))})")
        cls = typing.get_type_hints(cls)[part]
        last = depth == len(parts) - 1
        if last and dataclasses.is_dataclass(cls):
            raise ConfigError(variable, f"{'.'.join(parts)} is a section; name one of its keys")
        if not last and not dataclasses.is_dataclass(cls):
            raise ConfigError(variable, f"{'.'.join(parts[: depth + 1])} has no sub-keys")


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``STREAMWAL_<SECTION>__<KEY>`` variables; other ``STREAMWAL_*`` ones have no ``__``."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        parts = name[len(ENV_PREFIX) :].lower().split("__")
        _check_env_path(name, parts)
        target = out.setdefault(parts[0], {})
        for part in parts[1:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return out


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def load_config(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> NodeConfig:
    """Read ``path`` (optional), apply ``STREAMWAL_*`` overrides, validate everything."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError("config", f"{path} is not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError("config", f"{path} must hold a mapping of sections")
        data = loaded
    data = _merge(data, _env_overrides(os.environ if environ is None else environ))
    return typing.cast(NodeConfig, _build("", NodeConfig, data))
