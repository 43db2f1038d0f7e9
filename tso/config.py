"""TSO configuration: one frozen value, validated when built."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from streamwal import environment
from streamwal.defaults import ETCD_ENDPOINT
from streamwal.errors import ConfigError
from streamwal.tls_files import TLSFiles
from streamwal.tso.timestamp import MAX_LOGICAL

__all__ = [
    "DEFAULT_ETCD_ENDPOINT",
    "DEFAULT_KEY_PREFIX",
    "EtcdConfig",
    "OracleSettings",
    "TsoConfig",
    "key_prefix_path",
    "parse_endpoint",
]

DEFAULT_ETCD_ENDPOINT = ETCD_ENDPOINT
"""etcd's standard local endpoint (``$STREAMWAL_ETCD_ENDPOINTS`` wins where a default
is taken: :func:`streamwal.environment.etcd_endpoints`)."""


DEFAULT_KEY_PREFIX = "/streamwal"
"""Where a cluster's keys live in etcd when nothing else is said: the oracle's
(``<prefix>/tso/``) and the cluster's (``<prefix>/cluster/``)."""


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``(host, port)`` from ``host:port`` or ``http://host:port``.

    Raises :class:`~streamwal.errors.ConfigError` naming ``endpoints`` when malformed.
    """
    text = endpoint.strip()
    for scheme in ("http://", "https://"):
        if text.startswith(scheme):
            text = text[len(scheme) :]
    text = text.rstrip("/")
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError("endpoints", f"not host:port: {endpoint!r}")
    return host, int(port_text)


def key_prefix_path(prefix: object, *, exact: bool = False) -> str:
    """``prefix`` as the etcd path it names, ``/a/b``: the one rule for a key prefix.

    It must hold a non-empty path without whitespace; leading and trailing slashes are
    added or dropped (``"cluster-a/"`` is ``/cluster-a``). ``exact``: a node's file
    says literally what it writes to, so the prefix must already start with ``/`` and
    not end with one. Raises :class:`~streamwal.errors.ConfigError` naming ``key_prefix``.
    """
    valid = (
        isinstance(prefix, str) and bool(prefix.strip("/")) and not any(c.isspace() for c in prefix)
    )
    if exact:
        if not valid or not str(prefix).startswith("/") or str(prefix).endswith("/"):
            raise ConfigError(
                "key_prefix", f"expected a path like /streamwal (no trailing /), got {prefix!r}"
            )
    elif not valid:
        raise ConfigError("key_prefix", f"must be a non-empty path: {prefix!r}")
    return "/" + str(prefix).strip("/")


@dataclass(frozen=True, kw_only=True)
class OracleSettings:
    """The oracle's own tunables, declared once: :class:`TsoConfig` has them, and so
    has a node's ``tso:`` section (``streamwal.node.config.TSOSettings``), which adds
    what only a node decides (in-process or remote, TLS) and takes etcd's settings from
    its ``etcd:`` section. Validated here, at construction, for both.

    ``key_prefix`` separates clusters sharing one etcd: the leader key and the saved
    window live under ``<key_prefix>/tso/``. ``save_window_s`` is how far ahead of the
    serving physical time the persisted bound runs; a new leader starts above it, so
    a leader change never hands out a lower timestamp.
    """

    #: a node's file gives its prefix exactly (:func:`key_prefix_path`); a library
    #: caller's is normalised
    exact_key_prefix: ClassVar[bool] = False

    #: the oracle's keys in etcd are ``<key_prefix>/tso/...``: one prefix per cluster
    key_prefix: str = DEFAULT_KEY_PREFIX
    #: the leader's etcd lease, whole seconds: how long a dead leader keeps the role
    lease_ttl_s: int = 3
    #: how far ahead of the served physical time the persisted bound runs
    save_window_s: float = 3.0
    #: how often the leader advances its physical time (and the window when due)
    update_interval_s: float = 0.05
    #: timestamps a client takes from the oracle at once
    batch_size: int = 1000

    def __post_init__(self) -> None:
        prefix = key_prefix_path(self.key_prefix, exact=self.exact_key_prefix)
        if not self.exact_key_prefix:
            object.__setattr__(self, "key_prefix", prefix)
        if isinstance(self.lease_ttl_s, bool) or not isinstance(self.lease_ttl_s, int):
            raise ConfigError("lease_ttl_s", f"must be whole seconds: {self.lease_ttl_s!r}")
        if self.lease_ttl_s < 1:
            raise ConfigError("lease_ttl_s", f"must be >= 1: {self.lease_ttl_s}")
        for name in ("save_window_s", "update_interval_s"):
            _positive_number(name, getattr(self, name))
        if self.save_window_s * 1000 < 2:
            raise ConfigError("save_window_s", f"must be at least 2 ms: {self.save_window_s}")
        if self.save_window_s <= self.update_interval_s:
            raise ConfigError(
                "save_window_s",
                f"must exceed update_interval_s ({self.save_window_s} <= {self.update_interval_s})",
            )
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise ConfigError("batch_size", f"must be an integer: {self.batch_size!r}")
        if not 1 <= self.batch_size < MAX_LOGICAL:
            raise ConfigError("batch_size", f"must be in [1, {MAX_LOGICAL}): {self.batch_size}")


def _positive_number(name: str, value: object) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(name, f"must be a positive number: {value!r}")


@dataclass(frozen=True)
class EtcdConfig:
    """How to reach etcd, declared and validated here once: a :class:`TsoConfig`'s
    ``etcd`` and a node's ``etcd:`` section are this object, and the cluster's store is
    built from it too. Errors name the field (``endpoints[0]``, ``tls.ca_file``); a
    node's loader places them under ``etcd.``.
    """

    #: ``host:port`` or ``http(s)://host:port`` each; ``$STREAMWAL_ETCD_ENDPOINTS``
    #: (comma separated), else etcd's standard local endpoint
    endpoints: tuple[str, ...] = field(
        default_factory=environment.etcd_endpoints,
        metadata=environment.default_from(environment.ETCD_ENDPOINTS),
    )
    #: authentication: a user, with password
    user: str | None = None
    #: the user's password, never shown in repr or errors
    password: str | None = field(default=None, repr=False)
    #: TLS: a CA to trust (enables TLS), optionally a client certificate and key
    tls: TLSFiles = field(default_factory=TLSFiles)
    _addresses: tuple[tuple[str, int], ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        endpoints: Iterable[str] = (
            (self.endpoints,) if isinstance(self.endpoints, str) else self.endpoints
        )
        endpoints = tuple(endpoints)
        if not endpoints:
            raise ConfigError("endpoints", "at least one endpoint is needed")
        addresses = []
        for i, endpoint in enumerate(endpoints):
            try:
                addresses.append(parse_endpoint(endpoint))
            except ConfigError as exc:
                raise ConfigError(f"endpoints[{i}]", exc.problem) from None
        object.__setattr__(self, "endpoints", endpoints)
        object.__setattr__(self, "_addresses", tuple(addresses))
        if (self.user is None) != (self.password is None):
            raise ConfigError("user", "user and password go together")
        self.tls.check("tls", server=False)
        if self.tls.cert_file is not None and self.tls.ca_file is None:
            raise ConfigError("tls.ca_file", "a client certificate needs a CA file")

    @property
    def addresses(self) -> tuple[tuple[str, int], ...]:
        """The endpoints as ``(host, port)`` pairs."""
        return self._addresses


@dataclass(frozen=True)
class TsoConfig(OracleSettings):
    """Settings of one TSO cluster: the oracle's own (:class:`OracleSettings`:
    ``key_prefix``, ``lease_ttl_s``, ``save_window_s``, ``update_interval_s``,
    ``batch_size``, keyword-only) and how it reaches etcd (:class:`EtcdConfig`).

    ``unavailable_after_s`` bounds how long a caller waits for a serving oracle (or
    etcd) before it gets :class:`~streamwal.errors.UnavailableError`;
    ``etcd_timeout_s`` bounds one etcd request.
    """

    #: endpoints, credentials and TLS
    etcd: EtcdConfig = field(default_factory=EtcdConfig)
    #: how long a caller waits for a serving oracle (or etcd)
    unavailable_after_s: float = 5.0
    #: the bound of one etcd request
    etcd_timeout_s: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.etcd, EtcdConfig):
            raise ConfigError("etcd", f"expected an EtcdConfig, got {type(self.etcd).__name__}")
        super().__post_init__()
        for name in ("unavailable_after_s", "etcd_timeout_s"):
            _positive_number(name, getattr(self, name))

    @property
    def endpoints(self) -> tuple[tuple[str, int], ...]:
        """The etcd endpoints as ``(host, port)`` pairs."""
        return self.etcd.addresses

    @property
    def leader_key(self) -> str:
        return f"{self.key_prefix}/tso/leader"

    @property
    def timestamp_key(self) -> str:
        """Where the saved window (a physical millisecond bound) is persisted."""
        return f"{self.key_prefix}/tso/timestamp"

    @property
    def save_window_ms(self) -> int:
        return max(2, round(self.save_window_s * 1000))
