"""A namespace of its own on the private stock broker, for one test."""

from __future__ import annotations

from dataclasses import dataclass

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.tso import InProcessTSO, TsoConfig
from streamwal_lab.chaos.services import PrivatePulsar


def stock_config(stock: PrivatePulsar, namespace: str, **overrides: object) -> PulsarConfig:
    """The WAL's Pulsar config for ``namespace`` of the stock broker (policies read)."""
    return PulsarConfig(
        service_url=stock.url,
        admin_url=stock.admin_url,
        namespace=namespace,
        **overrides,  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class StockNamespace:
    """A fresh namespace (deduplication on, nothing else set), its admin API and a TSO."""

    broker: PrivatePulsar
    name: str
    admin: PulsarAdmin
    tso: TsoConfig

    def config(self, **overrides: object) -> PulsarConfig:
        return stock_config(self.broker, self.name, **overrides)

    def in_process_tso(self) -> InProcessTSO:
        """A TSO on this test's etcd prefix, not yet entered: a test that stops its WAL
        and opens it again enters another one on the same prefix."""
        return InProcessTSO(self.tso)
