"""Safe by default: a node reachable from other hosts serves only over TLS, to known
callers, unless its file says ``auth.insecure: true`` on purpose.

A node on a loopback address is reachable from this host only, so it may run without
either (the development default). Anything else (a wildcard, a host name, an
interface's address) needs ``node.tls`` and ``auth.enabled``: without TLS a token
travels in clear and without auth any client the CA signed may truncate any channel.
"""

from __future__ import annotations

from streamwal.errors import MisconfiguredError
from streamwal.listen import is_loopback
from streamwal.node.auth_settings import AuthSettings
from streamwal.tls_files import TLSFiles

__all__ = ["InsecureExposureError", "exposure_warning", "is_loopback"]


class InsecureExposureError(MisconfiguredError):
    """The node would serve a non-loopback address without TLS and auth."""


def exposure_warning(listen: str, tls: TLSFiles, auth: AuthSettings) -> str | None:
    """``None`` when the node may serve ``listen`` as configured; the warning to log
    (and show on /readyz) when ``auth.insecure`` lets it serve anyway; else raises
    :class:`InsecureExposureError` naming what to configure."""
    if is_loopback(listen):
        return None
    missing = []
    if tls.cert_file is None:
        missing.append("node.tls (cert_file, key_file; ca_file for client certificates)")
    if not auth.enabled:
        missing.append("auth.enabled with auth.identities")
    if not missing:
        return None
    text = f"node.listen {listen!r} is reachable from other hosts without {' and '.join(missing)}"
    if auth.insecure:
        return f"insecure: {text} (auth.insecure is true)"
    raise InsecureExposureError(
        f"refusing to serve: {text}; configure them, listen on a loopback address, or set "
        "auth.insecure: true to serve anyway"
    )
