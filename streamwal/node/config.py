"""The node's configuration: YAML file, then environment overrides, then defaults.

The endpoints' defaults are Pulsar's and etcd's standard local ones, unless
:mod:`streamwal.environment` names others (``STREAMWAL_PULSAR_SERVICE_URL``,
``STREAMWAL_ETCD_ENDPOINTS``, beneath the file), so ``streamwal serve`` with no file
runs against a stock Pulsar and etcd on this machine. The ``pulsar:``, ``etcd:`` and
``wal:`` sections are the library's own :class:`~streamwal.adaptors.pulsar.PulsarConfig`,
:class:`~streamwal.tso.config.EtcdConfig` and :class:`~streamwal.wal.WALConfig`: same
names, same units (seconds unless a name says ``_ms``), their defaults and validation,
declared once. The ``tso:`` section's oracle keys are the library's own
(:class:`~streamwal.tso.config.OracleSettings`, which :class:`~streamwal.tso.TsoConfig`
also is, declared and validated there once) beside the node's own (``mode``,
``remote_addresses``, ``tls``); with the ``etcd:`` section they build the library's
``TsoConfig``, whose validation runs at load too. An environment variable
``STREAMWAL_<SECTION>__<KEY>`` (for example ``STREAMWAL_PULSAR__AUTH_TOKEN``,
``STREAMWAL_WAL__APPEND_BACKOFF__MAX_ATTEMPTS``) overrides the file. Any invalid or
unknown key raises :class:`ConfigError` naming it (``pulsar.service_url: ...``), and
so does a ``STREAMWAL_*__*`` variable that names no key
(``STREAMWAL_PULSAR__SERVICE_ULR: ...``). Secrets (Pulsar token, etcd password)
never appear in ``repr`` or in error messages.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import platformdirs
import yaml

from streamwal import environment
from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.defaults import METRICS_LISTEN, NODE_LISTEN
from streamwal.errors import ConfigError
from streamwal.node.auth_settings import AuthSettings, IdentitySettings
from streamwal.node.cluster_settings import ClusterSettings
from streamwal.node.tracing import DEFAULT_RATIO, DEFAULT_SAMPLER, SAMPLERS
from streamwal.tls_files import ClientTLSFiles, TLSFiles
from streamwal.tso.config import EtcdConfig, OracleSettings, TsoConfig
from streamwal.wal.config import WALConfig

__all__ = [
    "AuthSettings",
    "ClientTLSFiles",
    "ConfigError",
    "EtcdConfig",
    "IdentitySettings",
    "NodeConfig",
    "NodeSettings",
    "TSOSettings",
    "TelemetrySettings",
    "TracingSettings",
    "load_config",
    "tso_config",
]

ENV_PREFIX = "STREAMWAL_"
SECRET_KEYS = frozenset({"auth_token", "password"})


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


#: what ``node.front`` takes (streamwal.server.front starts the native one)
FRONTS = ("python", "native")

#: what ``node.log_format`` takes (streamwal.node.logs formats them)
LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class NodeSettings:
    #: the node's id, unique in its cluster; written into every message it appends
    id: int = 1
    #: host:port of the node's gRPC service (StreamingNode, health, the in-process TSO)
    listen: str = NODE_LISTEN
    #: host:port other nodes dial to reach this one; a leading in-process oracle
    #: publishes it in etcd for the other candidates. Empty: ``listen`` with the
    #: bound port, so ``listen`` must then name a concrete host, not 0.0.0.0
    advertise_address: str = ""
    #: Prometheus /metrics; empty disables it
    metrics_listen: str = METRICS_LISTEN
    #: a ready node that has not reached its broker for this long turns not ready
    #: (gRPC health, /readyz, its cluster record: the balancer moves its channels)
    broker_lost_after_s: float = 15.0
    #: the gRPC server's TLS: cert_file and key_file turn it on; ca_file also requires
    #: client certificates signed by that CA
    tls: TLSFiles = field(default_factory=TLSFiles)
    #: how long SIGTERM waits for in-flight appends before closing channels
    shutdown_grace_s: float = 10.0
    #: the node's lines on stderr (and in its Pulsar client log): ``text``, or ``json``
    #: for a collector (one object per line: time, level, logger, node, message)
    log_format: str = "text"
    #: the folder of the node's Pulsar client log, ``pulsar-client-node-<id>.log``;
    #: empty: the user's log folder. ``pulsar.client_log_file`` set to a path wins
    log_dir: str = ""
    #: what serves the clients on ``listen``: ``python`` (the node's grpc.aio server),
    #: or ``native``: the ``streamwal-front`` binary (Go), which hands the unary
    #: ``Produce`` calls waiting together to the node as batch frames (docs/front.md);
    #: ``native`` does not serve TLS
    front: str = "python"
    #: the ``streamwal-front`` executable for ``front: native``; empty: the one next to
    #: the node's Python (``./dev`` builds it there), else the one on PATH
    front_binary: str = ""

    def check(self) -> None:
        if self.id < 0:
            raise ConfigError("node.id", f"must be >= 0, got {self.id}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(
                "node.log_format",
                f"expected one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}",
            )
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
        if self.broker_lost_after_s <= 0:
            raise ConfigError("node.broker_lost_after_s", "must be > 0")
        if self.front not in FRONTS:
            raise ConfigError(
                "node.front", f"expected one of {', '.join(FRONTS)}, got {self.front!r}"
            )
        if self.front == "native" and self.tls.cert_file:
            raise ConfigError(
                "node.front", "native does not serve TLS: with node.tls set, use python"
            )
        self.tls.check("node.tls", server=True)


@dataclass(frozen=True)
class TSOSettings(OracleSettings):
    """The ``tso:`` section: what only a node decides, plus the oracle's own settings
    (``key_prefix``, ``lease_ttl_s``, ``save_window_s``, ``update_interval_s``,
    ``batch_size``), which :class:`~streamwal.tso.config.OracleSettings` declares and
    validates for :class:`~streamwal.tso.TsoConfig` too. The key prefix is taken
    exactly as written: the oracle's keys are ``<key_prefix>/tso/...``."""

    exact_key_prefix: ClassVar[bool] = True

    #: ``in-process``: this node campaigns for the oracle on etcd and serves it;
    #: ``remote``: it asks the oracle's gRPC service at ``remote_addresses``.
    mode: str = "in-process"
    #: host:port of the oracle's gRPC services, in remote mode
    remote_addresses: tuple[str, ...] = ()
    #: TLS for dialling TSO services: the oracle nodes in remote mode, and this
    #: node's own and its peers' services in in-process mode (a non-leader follows
    #: the leader through them); unset: plain text
    tls: ClientTLSFiles = field(default_factory=ClientTLSFiles)

    def check(self) -> None:
        if self.mode not in ("in-process", "remote"):
            raise ConfigError("tso.mode", f"must be in-process or remote, got {self.mode!r}")
        if self.mode == "remote" and not self.remote_addresses:
            raise ConfigError("tso.remote_addresses", "remote mode needs at least one address")
        for i, address in enumerate(self.remote_addresses):
            _host_port(f"tso.remote_addresses[{i}]", address)
        self.tls.check("tso.tls")


def tso_config(etcd: EtcdConfig, tso: TSOSettings) -> TsoConfig:
    """The library's oracle config from the ``etcd:`` and ``tso:`` sections; its
    validation errors name the node's keys."""
    try:
        oracle = {f.name: getattr(tso, f.name) for f in dataclasses.fields(OracleSettings)}
        return TsoConfig(**oracle, etcd=etcd)
    except ConfigError as exc:
        raise ConfigError(f"tso.{exc.key}", exc.problem) from None


@dataclass(frozen=True)
class TelemetrySettings:
    #: the logical service (``service.name``); each node is told apart by
    #: ``service.instance.id`` = ``node-<id>``. ``OTEL_SERVICE_NAME`` wins when set
    service_name: str = field(
        default="streamwal-node", metadata=environment.set_by("OTEL_SERVICE_NAME")
    )
    #: ``OTEL_EXPORTER_OTLP_ENDPOINT`` wins when set; empty and unset: no export.
    #: ``http://host:4317`` is plain text; ``https://`` or no scheme is TLS (see
    #: streamwal/node/telemetry.py for the standard variables that configure it)
    otlp_endpoint: str = field(
        default="", metadata=environment.set_by("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    #: whether the node makes spans at all
    tracing: bool = True
    #: the node's log level: DEBUG, INFO, WARNING or ERROR
    log_level: str = "INFO"

    def check(self) -> None:
        _non_empty("telemetry.service_name", self.service_name)
        if self.otlp_endpoint:
            _otlp_url("telemetry.otlp_endpoint", self.otlp_endpoint)
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError("telemetry.log_level", f"unknown level {self.log_level!r}")


@dataclass(frozen=True)
class TracingSettings:
    """Which new traces are kept; ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG``
    win when set, as in every OpenTelemetry SDK. A channel's lifecycle spans and the
    children of a caller's sampled span are kept whatever these say
    (:mod:`streamwal.node.tracing`)."""

    #: a standard name: always_on, always_off, traceidratio, parentbased_always_on,
    #: parentbased_always_off, parentbased_traceidratio
    sampler: str = field(
        default=DEFAULT_SAMPLER, metadata=environment.set_by("OTEL_TRACES_SAMPLER")
    )
    #: the share of new root traces the ratio-based samplers keep, 0..1
    ratio: float = field(
        default=DEFAULT_RATIO, metadata=environment.set_by("OTEL_TRACES_SAMPLER_ARG")
    )

    def check(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ConfigError(
                "tracing.sampler", f"expected one of {', '.join(SAMPLERS)}, got {self.sampler!r}"
            )
        if not 0.0 <= self.ratio <= 1.0:
            raise ConfigError("tracing.ratio", f"must be within 0..1, got {self.ratio!r}")


def _standard_sampler(settings: TracingSettings, environ: Mapping[str, str]) -> TracingSettings:
    """``OTEL_TRACES_SAMPLER``/``_ARG`` over the file's ``tracing:``; a bad value names
    the variable (other SDKs fall back silently, which hides a typo until traces are
    missing)."""
    name = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    arg = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if not name and not arg:
        return settings
    if name and name not in SAMPLERS:
        raise ConfigError(
            "OTEL_TRACES_SAMPLER", f"expected one of {', '.join(SAMPLERS)}, got {name!r}"
        )
    ratio = settings.ratio
    if arg:
        try:
            ratio = float(arg)
        except ValueError:
            raise ConfigError(
                "OTEL_TRACES_SAMPLER_ARG", f"expected a number, got {arg!r}"
            ) from None
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError("OTEL_TRACES_SAMPLER_ARG", f"must be within 0..1, got {arg!r}")
    return TracingSettings(sampler=name or settings.sampler, ratio=ratio)


@dataclass(frozen=True)
class NodeConfig:
    node: NodeSettings = field(default_factory=NodeSettings)
    #: the library's config: the section's keys are its fields (see PulsarConfig)
    pulsar: PulsarConfig = field(
        default_factory=lambda: PulsarConfig(client_log_file=_default_client_log())
    )
    #: the library's config: the section's keys are its fields (see EtcdConfig)
    etcd: EtcdConfig = field(default_factory=EtcdConfig)
    tso: TSOSettings = field(default_factory=TSOSettings)
    #: the library's config: the section's keys are its fields (see WALConfig)
    wal: WALConfig = field(default_factory=WALConfig)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    #: sampling of traces (``OTEL_TRACES_SAMPLER``/``_ARG`` win)
    tracing: TracingSettings = field(default_factory=TracingSettings)
    #: membership, balancing and failover through etcd (off: channels are assigned by RPC)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    #: who may call the node and what each may do (docs/auth.md); off by default
    auth: AuthSettings = field(default_factory=AuthSettings)

    def __post_init__(self) -> None:
        for section in (self.node, self.tso, self.telemetry, self.tracing, self.cluster):
            section.check()
        self.auth.check()
        for i, identity in enumerate(self.auth.identities):
            if identity.certificate is not None and self.node.tls.ca_file is None:
                raise ConfigError(
                    f"auth.identities[{i}].certificate",
                    "a certificate identity needs client certificates: set node.tls.ca_file",
                )
        if (
            self.cluster.enabled
            and not self.node.advertise_address
            and _is_wildcard(self.node.listen)
        ):
            raise ConfigError(
                "node.advertise_address",
                "a cluster node publishes its address for clients and must not advertise "
                f"a wildcard ({self.node.listen!r}): set the host:port clients reach it at",
            )
        tso_config(self.etcd, self.tso)  # the oracle's own validation, at load
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


def _default_client_log() -> str:
    """A node logs the Pulsar client natively (``PulsarConfig.client_log_file``); ""
    sends it through Python logging."""
    return str(platformdirs.user_log_path("streamwal") / "pulsar-client.log")


# ---- loading --------------------------------------------------------------------------


def _coerce(key: str, hint: Any, value: Any, default: Any = None) -> Any:
    """Turn YAML or environment text into the field's type, or say which key is wrong.

    A section (a dataclass) starts from ``default``, the field's default object, so a
    file can set one key of it (``wal.append_backoff.max_attempts``) alone."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(key, inner[0], value, default)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
        return _build(key, hint, value, default)  # type: ignore[arg-type]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            known = ", ".join(str(m.value) for m in hint)
            raise ConfigError(key, f"expected one of {known}, got {value!r}") from None
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


def _default_of(cls: type, name: str, base: Any) -> Any:
    """The value ``name`` takes when a section does not set it."""
    if base is not None:
        return getattr(base, name)
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _build(prefix: str, cls: type, data: Mapping[str, Any], base: Any = None) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise ConfigError(where, f"unknown key (known: {', '.join(sorted(names))})")
    kwargs = {} if base is None else {n: getattr(base, n) for n in names}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else name
        default = _default_of(cls, name, base) if dataclasses.is_dataclass(hints[name]) else None
        kwargs[name] = _coerce(key, hints[name], value, default)
    try:
        return cls(**kwargs)
    except ConfigError as exc:  # a library config names its field: place it in the file
        raise ConfigError(f"{prefix}.{exc.key}" if prefix else exc.key, exc.problem) from None
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


def _flag_overrides(settings: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--set section.key=value`` flags, checked as the variables are (a typo in a key
    is named, never ignored)."""
    out: dict[str, dict[str, Any]] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        parts = key.strip().lower().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {setting}", "expected section.key=value")
        _check_env_path(f"--set {key.strip()}", parts)
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


def _endpoint_defaults(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The endpoints :mod:`streamwal.environment` names, read from ``environ`` (not the
    process's, so a caller's mapping decides), beneath the file: a file's key wins."""
    return {
        "pulsar": {"service_url": environment.pulsar_service_url(environ)},
        "etcd": {"endpoints": list(environment.etcd_endpoints(environ))},
    }


def load_config(
    path: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Sequence[str] = (),
) -> NodeConfig:
    """The one loader: ``path`` (optional), then the ``STREAMWAL_<SECTION>__<KEY>``
    variables, then ``overrides`` (``section.key=value``, the ``--set`` flags); beneath
    them all the endpoints :mod:`streamwal.environment` names, then the defaults.
    Everything is validated; an unknown key anywhere is named."""
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
    environ = os.environ if environ is None else environ
    data = _merge(_merge(_endpoint_defaults(environ), data), _env_overrides(environ))
    data = _merge(data, _flag_overrides(overrides))
    config = typing.cast(NodeConfig, _build("", NodeConfig, data))
    tracing = _standard_sampler(config.tracing, environ)
    return config if tracing == config.tracing else dataclasses.replace(config, tracing=tracing)
