"""What every suite runs against: the broker and etcd, and where progress goes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["BenchTarget"]


def _silent(_: str) -> None:
    return None


@dataclass(frozen=True)
class BenchTarget:
    """Addresses of the services under test; ``progress`` gets one line per step."""

    pulsar_url: str
    etcd_endpoint: str
    pulsar_admin_url: str | None = None
    progress: Callable[[str], None] = field(default=_silent, compare=False)
