"""The options a command that reaches etcd by ``--etcd`` takes to log in: an etcd
user with a password file, and TLS (a CA, a client certificate).

Declared once, so ``streamwal cluster`` and ``streamwal produce``/``consume`` spell
them alike, and turned into the one :class:`~streamwal.tso.config.EtcdConfig` a node's
``etcd:`` section also loads into. The password is read from a file, never given on
the command line, where other users of the machine could read it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streamwal.errors import ConfigError
from streamwal.tls_files import TLSFiles
from streamwal.tso.config import EtcdConfig

__all__ = [
    "ETCD_CREDENTIAL_OPTIONS",
    "add_etcd_credential_options",
    "etcd_from_options",
    "given_etcd_credentials",
]

#: the options' attribute names, as argparse stores them
ETCD_CREDENTIAL_OPTIONS = (
    "etcd_user",
    "etcd_password_file",
    "etcd_ca_file",
    "etcd_cert_file",
    "etcd_key_file",
)


def add_etcd_credential_options(parser: argparse.ArgumentParser, *, default: Any = None) -> None:
    """``--etcd-user``, ``--etcd-password-file``, ``--etcd-ca-file``,
    ``--etcd-cert-file``, ``--etcd-key-file`` (``default``: ``argparse.SUPPRESS`` for a
    sub-command's parser that must not reset what its parent read)."""
    etcd = parser.add_argument_group("etcd credentials (with --etcd; a node file has its own)")
    etcd.add_argument("--etcd-user", metavar="USER", default=default, help="an etcd user")
    etcd.add_argument(
        "--etcd-password-file",
        metavar="PATH",
        default=default,
        help="a file holding the etcd user's password",
    )
    etcd.add_argument(
        "--etcd-ca-file", metavar="PATH", default=default, help="the CA of etcd's certificate"
    )
    etcd.add_argument(
        "--etcd-cert-file",
        metavar="PATH",
        default=default,
        help="a client certificate for etcd (with --etcd-key-file)",
    )
    etcd.add_argument("--etcd-key-file", metavar="PATH", default=default, help="its key")


def given_etcd_credentials(args: argparse.Namespace) -> list[str]:
    """The etcd credential options given, as ``--etcd-...`` names."""
    return [
        "--" + name.replace("_", "-")
        for name in ETCD_CREDENTIAL_OPTIONS
        if getattr(args, name, None) is not None
    ]


def etcd_from_options(endpoints: Sequence[str], args: argparse.Namespace) -> EtcdConfig:
    """The :class:`EtcdConfig` of ``endpoints`` with the options' credentials; a bad
    combination or a password file that cannot be read raises :class:`ConfigError`
    naming the option (never the password)."""
    password = None
    path = getattr(args, "etcd_password_file", None)
    if path is not None:
        try:
            password = Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(
                "--etcd-password-file", f"cannot read {path}: {exc.strerror}"
            ) from None
        if not password:
            raise ConfigError("--etcd-password-file", f"{path} is empty")
    user = getattr(args, "etcd_user", None)
    if (user is None) != (password is None):
        raise ConfigError("--etcd-user", "--etcd-user and --etcd-password-file go together")
    tls = TLSFiles(
        ca_file=getattr(args, "etcd_ca_file", None),
        cert_file=getattr(args, "etcd_cert_file", None),
        key_file=getattr(args, "etcd_key_file", None),
    )
    try:
        return EtcdConfig(tuple(endpoints), user=user, password=password, tls=tls)
    except ConfigError as exc:
        raise ConfigError(_OPTION_OF.get(exc.key, "--etcd"), exc.problem) from None


#: the option an :class:`EtcdConfig` error's key stands for
_OPTION_OF = {
    "user": "--etcd-user",
    "tls": "--etcd-cert-file",
    "tls.ca_file": "--etcd-ca-file",
    "tls.cert_file": "--etcd-cert-file",
    "tls.key_file": "--etcd-key-file",
}
