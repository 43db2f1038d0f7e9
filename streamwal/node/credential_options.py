"""The options a command that dials nodes takes to say who it is: a bearer token file
and/or a client certificate, and the CA it trusts (docs/auth.md).

Declared once, so every such command spells them alike; the token is read from a file,
never given on the command line, where other users of the machine could read it.
"""

from __future__ import annotations

import argparse

from streamwal.errors import ConfigError
from streamwal.tso.tls import ClientTLS, TLSFileError, read_token_file

__all__ = ["add_credential_options", "client_credentials"]


def add_credential_options(parser: argparse.ArgumentParser) -> None:
    who = parser.add_argument_group("who (a node with auth.enabled or TLS)")
    who.add_argument("--token-file", metavar="PATH", help="a file holding a bearer token")
    who.add_argument("--ca-file", metavar="PATH", help="the CA the nodes' certificates are from")
    who.add_argument("--cert-file", metavar="PATH", help="a client certificate (with --key-file)")
    who.add_argument("--key-file", metavar="PATH", help="the client certificate's key")
    who.add_argument(
        "--server-name", help="the name on the nodes' certificates, if not the dialled host"
    )


def client_credentials(args: argparse.Namespace) -> tuple[ClientTLS | None, str | None]:
    """The TLS settings (``None``: plain text) and the token the options give; a file
    that cannot be read raises :class:`ConfigError` naming its option."""
    token = None
    if args.token_file:
        try:
            token = read_token_file(args.token_file)
        except TLSFileError as exc:
            raise ConfigError("--token-file", str(exc)) from None
    if (args.cert_file is None) != (args.key_file is None):
        raise ConfigError("--cert-file", "--cert-file and --key-file go together")
    if not (args.ca_file or args.cert_file):
        if args.server_name:
            raise ConfigError("--server-name", "needs TLS: give --ca-file or --cert-file")
        return None, token
    tls = ClientTLS(
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
        server_name=args.server_name,
    )
    try:
        tls.credentials()  # the files are read now: a missing one is named before a call
    except TLSFileError as exc:
        raise ConfigError("--ca-file/--cert-file/--key-file", str(exc)) from None
    return tls, token
