"""Who made a call: a bearer token in its metadata, else its client certificate.

Tokens are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest`
against every known one (no early exit), so neither the comparison's time nor a
memory dump tells a token. A call that presents a token is judged by the token alone:
a wrong token is refused even over a connection whose certificate is known, so a
client that meant to use a token learns that it is wrong.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamwal.node.auth_settings import IdentitySettings, read_token

__all__ = ["AUTHORIZATION", "Identity", "IdentityBook", "Unknown"]

#: the metadata key a client sends its token in, as ``Bearer <token>``
AUTHORIZATION = "authorization"
_BEARER = "bearer "

#: the auth context's properties a certificate's names are read from
_CERT_NAMES = ("x509_common_name", "x509_subject_alternative_name")


@dataclass(frozen=True)
class Identity:
    """A known caller: its name, roles and channel prefixes (empty: every channel)."""

    name: str
    roles: frozenset[str]
    prefixes: tuple[str, ...] = ()

    def covers(self, channel: str) -> bool:
        return not self.prefixes or channel.startswith(self.prefixes)


@dataclass(frozen=True)
class Unknown:
    """No identity: why, as the UNAUTHENTICATED answer says it."""

    why: str


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class IdentityBook:
    """The identities of the ``auth:`` section, looked up by token or certificate name.

    Tokens are read once, when the book is built (a node start): a rotated token
    file takes effect at the next start.
    """

    def __init__(self, identities: Sequence[IdentitySettings]) -> None:
        self._tokens: list[tuple[bytes, Identity]] = []
        self._certificates: dict[str, Identity] = {}
        for i, settings in enumerate(identities):
            identity = Identity(settings.name, frozenset(settings.roles), tuple(settings.channels))
            if settings.token_file is not None or settings.token_env is not None:
                token = read_token(
                    f"auth.identities[{i}]", file=settings.token_file, env=settings.token_env
                )
                self._tokens.append((_digest(token), identity))
            if settings.certificate is not None:
                self._certificates[settings.certificate] = identity

    def identify(self, context: Any) -> Identity | Unknown:
        """The caller of the call whose servicer context is ``context``."""
        token = None
        for key, value in context.invocation_metadata() or ():
            if key == AUTHORIZATION:
                token = value if isinstance(value, str) else value.decode(errors="replace")
                break
        if token is not None:
            if token[: len(_BEARER)].lower() == _BEARER:
                token = token[len(_BEARER) :]
            return self._by_token(token.strip())
        if self._certificates:
            auth = context.auth_context() or {}
            for prop in _CERT_NAMES:
                for name in auth.get(prop, ()):
                    text = name.decode(errors="replace") if isinstance(name, bytes) else name
                    identity = self._certificates.get(text)
                    if identity is not None:
                        return identity
            if any(auth.get(prop) for prop in _CERT_NAMES):
                return Unknown("the client certificate names no identity this node knows")
        return Unknown("no bearer token and no client certificate this node knows")

    def _by_token(self, token: str) -> Identity | Unknown:
        digest = _digest(token)
        found: Identity | None = None
        for known, identity in self._tokens:  # every one: no early exit
            if hmac.compare_digest(digest, known):
                found = identity
        if found is None:
            return Unknown("the bearer token matches no identity this node knows")
        return found
