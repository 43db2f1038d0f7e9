"""Configuration of the Pulsar backend; a node's ``pulsar:`` section builds it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from streamwal import environment
from streamwal.errors import ConfigError

__all__ = ["PolicyAction", "PulsarAccessMode", "PulsarConfig"]


class PulsarAccessMode(enum.Enum):
    """Which exclusive mode a read-write open uses.

    ``EXCLUSIVE_WITH_FENCING`` (default) takes the topic over at once and fences the
    previous owner. ``EXCLUSIVE`` refuses while an earlier owner's producer is still
    there, so the open keeps retrying until that owner leaves (or its session ends).
    """

    EXCLUSIVE_WITH_FENCING = "ExclusiveWithFencing"
    EXCLUSIVE = "Exclusive"


class PolicyAction(enum.Enum):
    """What an open does about a broker policy that would lose or duplicate entries.

    ``REFUSE`` (the default) fails the open with
    :class:`~streamwal.errors.UnsafeBrokerPolicyError` before anything is written: such a
    policy loses acknowledged data silently, later, where nobody looks. ``WARN`` logs
    it and opens; ``IGNORE`` does not look.
    """

    REFUSE = "refuse"
    WARN = "warn"
    IGNORE = "ignore"


@dataclass(frozen=True)
class PulsarConfig:
    """How to reach the broker and how to write; validated at construction."""

    #: the broker's binary URL, ``pulsar://host:port`` or ``pulsar+ssl://host:port``
    #: (several hosts comma separated); ``$STREAMWAL_PULSAR_SERVICE_URL``, else
    #: Pulsar's standard local broker
    service_url: str = field(
        default_factory=environment.pulsar_service_url,
        metadata=environment.default_from(environment.PULSAR_SERVICE_URL),
    )
    #: the channels' topics are ``persistent://<tenant>/<namespace>/<channel>``
    tenant: str = "public"
    #: the namespace of the channels' topics, in ``tenant``
    namespace: str = "default"
    #: how a read-write open takes a topic over (:class:`PulsarAccessMode`)
    access_mode: PulsarAccessMode = PulsarAccessMode.EXCLUSIVE_WITH_FENCING
    #: bound on connecting, creating producers/readers and lookups
    operation_timeout_s: float = 10.0
    #: bound on one send; 0 lets the client retry for ever
    send_timeout_ms: int = 30_000
    #: the broker's maxMessageSize; larger payloads are refused before sending (the
    #: client refuses what is over the broker's own limit, metadata included, alike:
    #: InvalidInputError either way)
    max_message_size: int = 5 * 1024 * 1024
    #: batch in the client, with send receipts on segment edges instead of one per
    #: message (adaptors.pulsar.segments); False: one entry and receipt per message
    batching: bool = True
    #: how long the client holds a batch open for more messages
    batching_max_delay_ms: int = 1
    #: sends in flight per producer before a send waits
    max_pending_messages: int = 10_000
    #: how many Pulsar clients the writing channels of one opener share (each is a
    #: connection per broker and threads of its own); 0: one per channel. One is the
    #: fastest on few cores, and a moved channel costs its neighbours a reconnect, not an
    #: append (adaptors.pulsar.clients)
    writer_clients: int = 1
    #: a token for the broker's authentication (never shown)
    auth_token: str | None = None
    #: the CA file a ``pulsar+ssl://`` broker's certificate is checked against (unset:
    #: the system's CAs)
    tls_trust_certs_file: str | None = None
    #: accept a broker certificate that does not verify
    tls_allow_insecure: bool = False
    #: check that the broker's certificate names the host dialled
    tls_validate_hostname: bool = False
    #: check once per opener that the broker refuses a second exclusive producer
    verify_exclusivity: bool = True
    #: the broker's admin API, for the policy checks at open and to delete probe
    #: topics; None: ``$STREAMWAL_PULSAR_ADMIN_URL`` when service_url is the broker the
    #: environment names, else derived from service_url for Pulsar's standard ports
    #: (6650→8080, 6651→8443), else the policies are not read
    admin_url: str | None = field(
        default=None, metadata=environment.default_from(environment.PULSAR_ADMIN_URL)
    )
    #: the WAL's durable subscription on every channel (adaptors.pulsar.cursor): it
    #: keeps the log on a broker without retention; never delete it
    cursor_subscription: str = "streamwal-wal"
    #: a message TTL, an evicting backlog quota, or a deleted cursor in a namespace
    #: without retention (adaptors.pulsar.policies)
    on_unsafe_policy: PolicyAction = PolicyAction.REFUSE
    #: broker deduplication off for the namespace (probed) or the topic
    on_no_deduplication: PolicyAction = PolicyAction.REFUSE
    #: where the C++ client writes its warnings and errors, natively; None: through
    #: Python ``logging`` ("pulsar.client"), which takes the GIL for every line the
    #: client emits (debug lines included, a few per message), a cost on every append
    #: (docs/performance.md, "What the design choices save")
    client_log_file: str | None = None

    def __post_init__(self) -> None:
        scheme, sep, address = self.service_url.partition("://")
        if scheme not in ("pulsar", "pulsar+ssl") or not sep:
            raise ConfigError(
                "service_url",
                f"must start with pulsar:// or pulsar+ssl://, got {self.service_url!r}",
            )
        for i, host_port in enumerate(address.rstrip("/").split(",")):
            host, colon, port = host_port.rpartition(":")
            if not colon or not host or not port.isdigit() or not 0 <= int(port) < 65536:
                raise ConfigError(
                    f"service_url (host {i + 1})", f"expected host:port, got {host_port!r}"
                )
        for name in ("tenant", "namespace"):
            value = getattr(self, name)
            if not value or "/" in value:
                raise ConfigError(name, f"must be a non-empty name, got {value!r}")
        if not isinstance(self.access_mode, PulsarAccessMode):
            raise ConfigError("access_mode", f"not a PulsarAccessMode: {self.access_mode!r}")
        if self.operation_timeout_s <= 0:
            raise ConfigError("operation_timeout_s", "must be > 0")
        if self.send_timeout_ms < 0:
            raise ConfigError("send_timeout_ms", "must be >= 0")
        if self.max_message_size <= 0:
            raise ConfigError("max_message_size", "must be > 0")
        if self.max_pending_messages <= 0:
            raise ConfigError("max_pending_messages", "must be > 0")
        if self.writer_clients < 0:
            raise ConfigError("writer_clients", "must be >= 0 (0: one client per channel)")
        if self.batching_max_delay_ms < 0:
            raise ConfigError("batching_max_delay_ms", "must be >= 0")
        # pulsar+ssl:// without a trust file is fine: the client then verifies the broker
        # against the system CAs. A private CA needs the file, and the client would only
        # log a missing one once it connects; a trust file on plain pulsar:// does nothing.
        if self.tls_trust_certs_file and not Path(self.tls_trust_certs_file).is_file():
            raise ConfigError("tls_trust_certs_file", f"no such file: {self.tls_trust_certs_file}")
        if self.tls_trust_certs_file and scheme != "pulsar+ssl":
            raise ConfigError("tls_trust_certs_file", "set, but service_url is not pulsar+ssl://")
        if self.admin_url is not None and not self.admin_url.startswith(("http://", "https://")):
            raise ConfigError(
                "admin_url", f"must start with http:// or https://, got {self.admin_url!r}"
            )
        if not self.cursor_subscription or "/" in self.cursor_subscription:
            raise ConfigError(
                "cursor_subscription", f"must be a name, got {self.cursor_subscription!r}"
            )
        for name in ("on_unsafe_policy", "on_no_deduplication"):
            if not isinstance(getattr(self, name), PolicyAction):
                raise ConfigError(name, "must be refuse, warn or ignore")

    def topic(self, channel: str) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/{channel}"

    def __repr__(self) -> str:
        # never print the token
        token = "<redacted>" if self.auth_token else None
        return (
            f"PulsarConfig(service_url={self.service_url!r}, tenant={self.tenant!r}, "
            f"namespace={self.namespace!r}, access_mode={self.access_mode.value}, "
            f"auth_token={token})"
        )
