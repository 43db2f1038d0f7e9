"""Who made a call: a bearer token in its metadata, else its client certificate.

Tokens are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest`
against every known one (no early exit), so neither the comparison's time nor a
memory dump tells a token. A call that presents a token is judged by the token alone:
a wrong token is refused even over a connection whose certificate is known, so a
client that meant to use a token learns that it is wrong.

Anything ambiguous is refused rather than resolved by order: a call with several
``authorization`` entries (a proxy that adds one to a client's own, say), or a
certificate whose names belong to two identities, is UNAUTHENTICATED; which of two
answers a node would take is not something a caller should have to guess, or be
able to steer.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamwal.errors import ConfigError
from streamwal.node.auth_settings import IdentitySettings, read_token

__all__ = ["AUTHORIZATION", "Identity", "IdentityBook", "Unknown"]

#: the metadata key a client sends its token in, as ``Bearer <token>``
AUTHORIZATION = "authorization"
_BEARER = "bearer"

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


_NONE = Unknown("no bearer token and no client certificate this node knows")
_SEVERAL = Unknown("the call carries several authorization entries; send one")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _bearer(value: str | bytes) -> str:
    """The token of an ``authorization`` value: ``Bearer <token>`` (the scheme in any
    case, any white space around or after it), or the bare token."""
    text = value if isinstance(value, str) else value.decode(errors="replace")
    parts = text.split(None, 1)
    if len(parts) == 2 and parts[0].lower() == _BEARER:
        return parts[1].strip()
    return text.strip()


class IdentityBook:
    """The identities of the ``auth:`` section, looked up by token or certificate name.

    Tokens are read once, when the book is built (a node start): a rotated token
    file takes effect at the next start. Two identities with the same token, or the
    same certificate name, are refused here (:class:`ConfigError` naming both, never
    the token): either would make one of them the other, silently.
    """

    def __init__(self, identities: Sequence[IdentitySettings]) -> None:
        self._tokens: list[tuple[bytes, Identity]] = []
        self._certificates: dict[str, Identity] = {}
        for i, settings in enumerate(identities):
            key = f"auth.identities[{i}]"
            identity = Identity(settings.name, frozenset(settings.roles), tuple(settings.channels))
            if settings.token_file is not None or settings.token_env is not None:
                token = read_token(key, file=settings.token_file, env=settings.token_env)
                digest = _digest(token)
                for known, holder in self._tokens:
                    if hmac.compare_digest(digest, known):
                        raise ConfigError(
                            key, f"{settings.name!r} has the same token as {holder.name!r}"
                        )
                self._tokens.append((digest, identity))
            if settings.certificate is not None:
                other = self._certificates.get(settings.certificate)
                if other is not None:
                    raise ConfigError(
                        f"{key}.certificate",
                        f"{settings.certificate!r} is {other.name!r}'s certificate name too",
                    )
                self._certificates[settings.certificate] = identity

    def identify(self, context: Any) -> Identity | Unknown:
        """The caller of the call whose servicer context is ``context``."""
        value: str | bytes | None = None
        # gRPC delivers metadata keys in lower case (HTTP/2 header names), so one
        # comparison finds every spelling a client may have used
        for key, entry in context.invocation_metadata() or ():
            if key == AUTHORIZATION:
                if value is not None:
                    return _SEVERAL
                value = entry
        if value is not None:
            return self._by_token(_bearer(value))
        if self._certificates:
            return self._by_certificate(context.auth_context() or {})
        return _NONE

    def _by_certificate(self, auth: Any) -> Identity | Unknown:
        found: set[Identity] = set()
        named = False
        for prop in _CERT_NAMES:
            for name in auth.get(prop, ()):
                named = True
                text = name.decode(errors="replace") if isinstance(name, bytes) else name
                identity = self._certificates.get(text)
                if identity is not None:
                    found.add(identity)
        if len(found) == 1:
            return found.pop()
        if found:
            names = ", ".join(sorted(repr(i.name) for i in found))
            return Unknown(f"the client certificate names several identities ({names})")
        if named:
            return Unknown("the client certificate names no identity this node knows")
        return _NONE

    def _by_token(self, token: str) -> Identity | Unknown:
        digest = _digest(token)
        found: Identity | None = None
        for known, identity in self._tokens:  # every one: no early exit
            if hmac.compare_digest(digest, known):
                found = identity
        if found is None:
            return Unknown("the bearer token matches no identity this node knows")
        return found
