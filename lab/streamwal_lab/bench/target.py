"""What every suite runs against: the broker and etcd, and where progress goes."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.tso import EtcdConfig, InProcessTSO, TsoConfig
from streamwal_lab.stack.tso_keys import deleted_afterwards

__all__ = ["CLIENT_LOG", "BenchTarget", "Timing", "new_run"]

#: Every Pulsar client of a bench run (raw and WAL alike) logs natively here: through
#: Python ``logging`` the client's per-message debug lines cost each side GIL time
#: (see ``PulsarConfig.client_log_file``), which is not what the bench compares.
CLIENT_LOG = str(Path(tempfile.gettempdir()) / "streamwal-bench" / "pulsar-client.log")


def _silent(_: str) -> None:
    return None


def new_run() -> str:
    """A short id for one suite's run: its channels, etcd keys and logs carry it, so two
    runs against the same services (or a run's leftovers) never meet."""
    return uuid.uuid4().hex[:8]


class Timing(TypedDict, total=False):
    """The keywords every timed suite takes for its schedule (``seconds``, ``repeats``,
    ``warmup_s``; see :class:`streamwal_lab.bench.sides.Schedule`): one list, so the
    suites and their callers (the CLI, the tests) name them alike; what a caller leaves
    out takes ``Schedule.of``'s defaults."""

    seconds: float
    repeats: int
    warmup_s: float


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

    def pulsar_config(self, *, admin: bool = False) -> PulsarConfig:
        """A bench client's settings, logging natively to :data:`CLIENT_LOG`.

        ``admin`` names the target's admin URL outright for the policy checks at open;
        without it the opener derives the URL from the service URL, as a node does.
        """
        return PulsarConfig(
            service_url=self.pulsar_url,
            admin_url=self.pulsar_admin_url if admin else None,
            client_log_file=CLIENT_LOG,
        )

    def tso_config(self, key_prefix: str) -> TsoConfig:
        """The in-process TSO's settings under ``key_prefix`` (unique a run, removed after)."""
        return TsoConfig(etcd=EtcdConfig((self.etcd_endpoint,)), key_prefix=key_prefix)

    @contextlib.asynccontextmanager
    async def wal_services(
        self, key_prefix: str, config: PulsarConfig
    ) -> AsyncIterator[tuple[InProcessTSO, PulsarOpener]]:
        """What a suite's WALs in this process open with: an oracle under ``key_prefix``
        (its keys deleted once it has stopped) and an opener with ``config``."""
        async with (
            deleted_afterwards(self.etcd_endpoint, [key_prefix]),
            InProcessTSO(self.tso_config(key_prefix)) as tso,
            PulsarOpener(config) as opener,
        ):
            yield tso, opener
