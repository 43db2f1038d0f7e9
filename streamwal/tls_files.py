"""PEM file settings, shared by every section that names some: the node's server TLS,
its TSO client's, and etcd's (:class:`~streamwal.tso.config.EtcdConfig`).

Declared once so that a file that works in one section works in all, and a missing
file is named by its key at load (``etcd.tls.ca_file: no such file``) rather than
when the first connection is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamwal.errors import ConfigError

__all__ = ["ClientTLSFiles", "TLSFiles"]


@dataclass(frozen=True)
class TLSFiles:
    """PEM files; all optional. A server needs cert+key; a client may need only a CA."""

    #: a PEM CA file: the CA whose certificates are trusted (for a server: clients
    #: must present a certificate it signed)
    ca_file: str | None = None
    #: a PEM certificate, with key_file
    cert_file: str | None = None
    #: the PEM private key of cert_file
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

    #: the name the servers' certificates carry, when it is not the dialled host
    server_name: str | None = None

    def check(self, key: str, *, server: bool = False) -> None:
        super().check(key, server=False)
        if self.server_name is not None and not self.enabled:
            raise ConfigError(f"{key}.server_name", "needs TLS: set ca_file (or cert_file)")
