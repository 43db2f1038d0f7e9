"""Whether a listen address is reachable from other hosts: what every server of the
product asks before it serves without TLS and auth (the node, ``tso serve``)."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


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
