"""What every suite runs against: the broker and etcd, and where progress goes."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CLIENT_LOG", "BenchTarget"]

#: Every Pulsar client of a bench run (raw and WAL alike) logs natively here: through
#: Python ``logging`` the client's per-message debug lines cost each side GIL time
#: (see ``PulsarConfig.client_log_file``), which is not what the bench compares.
CLIENT_LOG = str(Path(tempfile.gettempdir()) / "streamwal-bench" / "pulsar-client.log")


def _silent(_: str) -> None:
    return None


@dataclass(frozen=True)
class BenchTarget:
    """Addresses of the services under test; ``progress`` gets one line per step."""

    pulsar_url: str
    etcd_endpoint: str
    pulsar_admin_url: str | None = None
    progress: Callable[[str], None] = field(default=_silent, compare=False)
    #: where a node the bench starts exports its traces (OTLP/gRPC), as a deployed
    #: node does; ``None``: its spans are made and dropped
    otlp_endpoint: str | None = None
