"""The ``auth:`` section of a node's file: who may call the node, and what each may do.

Declared beside the node's other sections (:mod:`streamwal.node.config`) so the one
loader reads, validates and documents it; :mod:`streamwal.node.auth` enforces it.
Tokens are never written in the file: an identity names the file or the environment
variable that holds its token, so the file can be shared and versioned, and a token
never reaches a ``repr``, a log line or an error message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from streamwal.errors import ConfigError

__all__ = ["ROLES", "AuthSettings", "IdentitySettings", "read_token"]

#: what an identity may be granted (docs/auth.md maps every RPC to one of them)
ROLES = ("admin", "producer", "consumer", "node")


def read_token(key: str, *, file: str | None = None, env: str | None = None) -> str:
    """The token in ``file`` (surrounding white space stripped) or ``env``; a missing or
    empty one raises :class:`ConfigError` naming ``key`` and where it looked, never
    the value."""
    if file is not None:
        try:
            token = Path(file).read_text().strip()
        except OSError as exc:
            raise ConfigError(key, f"cannot read token file {file}: {exc.strerror}") from None
        if not token:
            raise ConfigError(key, f"token file {file} is empty")
        return token
    if env is not None:
        token = os.environ.get(env, "").strip()
        if not token:
            raise ConfigError(key, f"environment variable {env} is unset or empty")
        return token
    raise ConfigError(key, "set token_file or token_env")


@dataclass(frozen=True)
class IdentitySettings:
    """One caller the node knows, by token or by client certificate (or both)."""

    #: the identity's name: what the audit log, spans and refusals say (never the token)
    name: str = ""
    #: admin, producer, consumer, node (the nodes' own calls to each other); several
    #: may be given
    roles: tuple[str, ...] = ()
    #: channel-name prefixes the roles apply to; empty: every channel
    channels: tuple[str, ...] = ()
    #: a file holding the identity's bearer token
    token_file: str | None = None
    #: an environment variable holding the identity's bearer token (token_file wins)
    token_env: str | None = None
    #: a client certificate's subject common name or subject alternative name (DNS,
    #: URI or IP): a caller presenting a certificate the node's CA signed with that
    #: name is this identity (needs node.tls.ca_file)
    certificate: str | None = None

    def check(self, key: str) -> None:
        if not self.name.strip():
            raise ConfigError(f"{key}.name", "must not be empty")
        if not self.roles:
            raise ConfigError(f"{key}.roles", f"give at least one of {', '.join(ROLES)}")
        for role in self.roles:
            if role not in ROLES:
                raise ConfigError(
                    f"{key}.roles", f"unknown role {role!r} (known: {', '.join(ROLES)})"
                )
        for prefix in self.channels:
            if not prefix:
                raise ConfigError(f"{key}.channels", "a prefix must not be empty")
        if self.token_file is None and self.token_env is None and self.certificate is None:
            raise ConfigError(key, "give token_file, token_env or certificate")
        if self.token_file is not None:  # a variable is read at start, from the process
            read_token(key, file=self.token_file)


@dataclass(frozen=True)
class AuthSettings:
    """Off by default (every caller may do everything, as a node on loopback did); a
    node that listens on another address refuses to start without TLS and this
    section, unless ``insecure`` says so."""

    #: every call but health checks needs a known identity with the right role
    enabled: bool = False
    #: serve a non-loopback address without TLS and auth anyway (a warning at start,
    #: and /readyz says so)
    insecure: bool = False
    #: the callers the node knows (see docs/auth.md)
    identities: tuple[IdentitySettings, ...] = ()
    #: the token this node presents to its peers' TSO services (an identity with the
    #: ``node`` role on them); unset: its tso.tls client certificate identifies it
    peer_token_file: str | None = None
    #: the environment variable holding that token (peer_token_file wins)
    peer_token_env: str | None = None

    def check(self) -> None:
        names: set[str] = set()
        certificates: dict[str, str] = {}
        for i, identity in enumerate(self.identities):
            identity.check(f"auth.identities[{i}]")
            if identity.name in names:
                raise ConfigError(f"auth.identities[{i}].name", f"{identity.name!r} is given twice")
            names.add(identity.name)
            if identity.certificate is not None:
                other = certificates.setdefault(identity.certificate, identity.name)
                if other != identity.name:  # one name, two identities: which would it be?
                    raise ConfigError(
                        f"auth.identities[{i}].certificate",
                        f"{identity.certificate!r} is {other!r}'s certificate name too",
                    )
        if self.enabled and not self.identities:
            raise ConfigError("auth.identities", "auth.enabled needs at least one identity")
        if self.peer_token_file is not None:
            read_token("auth.peer_token_file", file=self.peer_token_file)

    def peer_token(self) -> str | None:
        """The token this node dials its peers with, read now; ``None``: none set."""
        if self.peer_token_file is None and self.peer_token_env is None:
            return None
        return read_token(
            "auth.peer_token_file", file=self.peer_token_file, env=self.peer_token_env
        )
