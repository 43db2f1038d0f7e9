"""Safe by default: a node reachable from other hosts serves only over TLS, to known
callers, unless its file says ``auth.insecure: true`` on purpose.

A node on a loopback address is reachable from this host only, so it may run without
either (the development default). Anything else (a wildcard, a host name, an
interface's address) needs ``node.tls`` and ``auth.enabled``: without TLS a token
travels in clear and without auth any client the CA signed may truncate any channel.
"""

from __future__ import annotations

import ipaddress

from streamwal.errors import MisconfiguredError
from streamwal.node.auth_settings import AuthSettings
from streamwal.tls_files import TLSFiles

__all__ = ["InsecureExposureError", "exposure_warning", "is_loopback"]


class InsecureExposureError(MisconfiguredError):
    """The node would serve a non-loopback address without TLS and auth."""


def is_loopback(listen: str) -> bool:
    """Whether ``host:port`` binds a loopback address only (a wildcard binds all).

    Judged from the text, never by resolving it: ``localhost`` is loopback by its
    definition (RFC 6761), any other host name may resolve to an interface other
    hosts reach (today or after a DNS change), so it counts as exposed."""
    host = listen.rpartition(":")[0].strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a host name, or no host at all ("" binds every interface)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # ::ffff:127.0.0.1
    return address.is_loopback  # 0.0.0.0 and :: parse, and are not


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
