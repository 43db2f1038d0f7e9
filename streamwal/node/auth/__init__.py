"""Who may call a node and what each caller may do (docs/auth.md).

:mod:`~streamwal.node.auth.table` maps every RPC to the role it needs,
:mod:`~streamwal.node.auth.identities` tells who made a call (bearer token or client
certificate), :mod:`~streamwal.node.auth.gate` refuses what the caller may not do and
writes the audit log, and :mod:`~streamwal.node.auth.exposure` keeps a node that other
hosts can reach from serving without TLS and auth by accident.
"""

from __future__ import annotations

from streamwal.node.auth.exposure import InsecureExposureError, exposure_warning, is_loopback
from streamwal.node.auth.gate import AUDIT_LOGGER, IDENTITY_ATTRIBUTE, Authorizer
from streamwal.node.auth.identities import AUTHORIZATION, Identity, IdentityBook
from streamwal.node.auth.table import RULES, Rule, rule_rows

__all__ = [
    "AUDIT_LOGGER",
    "AUTHORIZATION",
    "IDENTITY_ATTRIBUTE",
    "RULES",
    "Authorizer",
    "Identity",
    "IdentityBook",
    "InsecureExposureError",
    "Rule",
    "exposure_warning",
    "is_loopback",
    "rule_rows",
]
