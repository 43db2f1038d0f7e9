"""Fault scenarios with ``auth.enabled`` (``streamwal chaos --auth``).

One identity holds every role (its clients write, read, assign and truncate, and the
nodes ask each other's TSO with its token as their peer token): the run checks that
a node checking every call keeps every guarantee through the faults, not the rule
table, which the test suite checks. The token is written to a file of the run, which
``STREAMWAL_TOKEN_FILE`` names for this process, so every ``NodeClient`` and
``ClusterClient`` of the scenarios sends it; the scenarios' raw gRPC channels come
from :func:`chaos_channel`, which sends it too.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpc import aio

from streamwal import environment
from streamwal.tso.tls import default_token, open_channel

__all__ = ["auth_section", "chaos_channel", "enable_auth"]

_ROLES = ["admin", "producer", "consumer", "node"]


def enable_auth(workdir: Path) -> Path:
    """Write the run's token file and name it in ``STREAMWAL_TOKEN_FILE``; its path."""
    path = workdir / "chaos.token"
    path.write_text(secrets.token_urlsafe(32))
    path.chmod(0o600)
    os.environ[environment.TOKEN_FILE] = str(path)
    return path


def auth_section(token_file: Path) -> dict[str, Any]:
    """The ``auth:`` section of every node of an authenticated run."""
    identity = {"name": "chaos", "roles": _ROLES, "token_file": str(token_file)}
    return {"enabled": True, "identities": [identity], "peer_token_file": str(token_file)}


def chaos_channel(address: str, options: Sequence[tuple[str, Any]] = ()) -> aio.Channel:
    """A plain-text channel that sends the run's token, if it has one."""
    return open_channel(address, None, options=options, token=default_token(None))
