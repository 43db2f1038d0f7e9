"""gRPC TLS credentials from PEM files, for both ends of a connection.

Every gRPC client in the project (the remote TSO source, node clients, the etcd
store) and the node's server build their credentials here, so a certificate that
works for one works for all, and mutual TLS means the same thing everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from streamwal import environment
from streamwal.errors import InvalidInputError, MisconfiguredError

__all__ = [
    "AUTHORIZATION",
    "ClientTLS",
    "TLSFileError",
    "bearer_interceptors",
    "default_token",
    "open_channel",
    "read_token_file",
    "server_credentials",
]

#: the metadata key a bearer token travels in (``Bearer <token>``)
AUTHORIZATION = "authorization"

#: gRPC channel options, as ``grpc.aio`` takes them
ChannelOptions = Sequence[tuple[str, Any]]


class TLSFileError(MisconfiguredError):
    """A certificate or key file cannot be read; ``path`` names it."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"cannot read TLS file {path}: {problem}")


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TLSFileError(path, exc.strerror or str(exc)) from None


def _read_optional(path: str | None) -> bytes | None:
    return None if path is None else _read(path)


@dataclass(frozen=True)
class ClientTLS:
    """A client's side of TLS: whom it trusts and, for mutual TLS, who it is.

    ``ca_file`` unset trusts gRPC's default roots. ``server_name`` is the name the
    server's certificate must carry when it differs from the dialled host (dialling
    an IP address, or every node of a cluster sharing one certificate).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidInputError("cert_file: and key_file go together (mutual TLS)")

    def credentials(self) -> grpc.ChannelCredentials:
        """Read the files now; a missing one raises :class:`TLSFileError`."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read_optional(self.ca_file),
            private_key=_read_optional(self.key_file),
            certificate_chain=_read_optional(self.cert_file),
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []


def default_token(token: str | None) -> str | None:
    """``token``, else the one in the file ``STREAMWAL_TOKEN_FILE`` names, else
    ``None``: what a client sends when its caller gave none."""
    if token is not None:
        return token
    path = environment.token_file()
    return None if path is None else read_token_file(path)


def read_token_file(path: str) -> str:
    """A bearer token from ``path``, surrounding white space stripped; a missing or
    empty file raises :class:`TLSFileError` naming the path (never the token)."""
    token = _read(path).decode(errors="replace").strip()
    if not token:
        raise TLSFileError(path, "the token file is empty")
    return token


class _Bearer:
    """Adds ``authorization: Bearer <token>`` to every call's metadata.

    An interceptor rather than call credentials: gRPC sends call credentials only over
    TLS, and a node on loopback may check tokens over plain text."""

    def __init__(self, token: str) -> None:
        self._entry = (AUTHORIZATION, f"Bearer {token}")

    def __repr__(self) -> str:
        return "_Bearer(<token>)"

    async def _forward(self, continuation: Any, details: Any, request: Any) -> Any:
        """Every call shape's ``intercept_*``: gRPC passes a request, or the iterator of
        requests of a streaming call, and either goes on unchanged."""
        metadata = aio.Metadata(*(details.metadata or ()))
        metadata.add(*self._entry)
        return await continuation(details._replace(metadata=metadata), request)


# gRPC sorts a channel's interceptors by their first matching base: one class a shape
class _UnaryUnary(_Bearer, aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    intercept_unary_unary = _Bearer._forward


class _UnaryStream(_Bearer, aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    intercept_unary_stream = _Bearer._forward


class _StreamUnary(_Bearer, aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    intercept_stream_unary = _Bearer._forward


class _StreamStream(_Bearer, aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    intercept_stream_stream = _Bearer._forward


def bearer_interceptors(token: str) -> list[Any]:
    """Client interceptors that send ``token`` with every call of a channel."""
    return [_UnaryUnary(token), _UnaryStream(token), _StreamUnary(token), _StreamStream(token)]


def open_channel(
    address: str,
    tls: ClientTLS | None,
    *,
    credentials: grpc.ChannelCredentials | None = None,
    options: ChannelOptions = (),
    interceptors: Sequence[Any] | None = None,
    token: str | None = None,
) -> aio.Channel:
    """A TLS channel when ``tls`` is given, else plain text.

    ``credentials`` lets a caller that opens many channels read the files once.
    ``token``: a bearer token sent with every call (a node with ``auth.enabled``).
    """
    if token is not None:
        interceptors = [*bearer_interceptors(token), *(interceptors or ())]
    if tls is None:
        return aio.insecure_channel(address, options=list(options), interceptors=interceptors)
    return aio.secure_channel(
        address,
        credentials if credentials is not None else tls.credentials(),
        options=[*options, *tls.channel_options()],
        interceptors=interceptors,
    )


def server_credentials(
    cert_file: str, key_file: str, client_ca_file: str | None = None
) -> grpc.ServerCredentials:
    """A server's certificate; with ``client_ca_file`` it requires client certificates
    signed by that CA (mutual TLS)."""
    client_ca = _read_optional(client_ca_file)
    return grpc.ssl_server_credentials(
        [(_read(key_file), _read(cert_file))],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )
