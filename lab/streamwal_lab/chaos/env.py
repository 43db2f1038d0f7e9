"""What every scenario runs in: the stack's addresses, a work folder, a seeded RNG.

A :class:`ChaosEnv` starts node processes, private brokers and private etcds for the
scenario and stops every one of them in :meth:`ChaosEnv.close`, whatever happened.
It also runs the history checker over channels once the traffic is stopped.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamwal.adaptors.pulsar.admin import admin_url_for
from streamwal.verify.cli import verify_channel
from streamwal_lab.chaos.auth import auth_section
from streamwal_lab.chaos.nodes import SERVE, NodeProcess
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.services import PrivateEtcd, PrivatePulsar
from streamwal_lab.chaos.traffic import Traffic
from streamwal_lab.stack.topics import delete_topics
from streamwal_lab.stack.tso_keys import delete_tso_keys

__all__ = ["ChaosEnv", "node_settings"]


def node_settings(
    pulsar_url: str, etcd_endpoint: str, tso: Mapping[str, Any], **sections: Mapping[str, Any]
) -> dict[str, Any]:
    """A node configuration tuned to notice faults quickly (short timeouts and backoffs)."""
    settings: dict[str, Any] = {
        "node": {"shutdown_grace_s": 3.0},
        "pulsar": {"service_url": pulsar_url, "operation_timeout_s": 3.0},
        "etcd": {"endpoints": [etcd_endpoint]},
        "tso": dict(tso),
        "wal": {
            "first_time_tick_backoff": {"maximum": 0.5},
            "append_backoff": {"maximum": 0.5, "max_attempts": 6},
            "time_tick_interval": 0.1,
        },
        "telemetry": {"log_level": "INFO"},
    }
    for name, values in sections.items():
        settings[name] = {**settings.get(name, {}), **values}
    return settings


@dataclass
class ChaosEnv:
    """The context of one scenario run; close it to stop everything it started."""

    workdir: Path
    pulsar_url: str
    etcd_endpoint: str
    rng: random.Random
    say: Callable[[str], None] = lambda _: None
    pulsar_admin_url: str | None = None
    #: the admin API of the broker at ``pulsar_url`` (the shared one's or a private
    #: stack's); the checker reads truncation points through it, truncating nodes use it
    admin_url: str | None = None
    #: a stock broker the caller lends (the test suite's, started once per session):
    #: :meth:`private_pulsar` hands it out instead of starting one, :meth:`close`
    #: leaves it running
    stock_pulsar: PrivatePulsar | None = None
    #: a run with ``auth.enabled`` on every node: the token file its identity and
    #: its clients use (:mod:`streamwal_lab.chaos.auth`); ``None``: no auth
    auth_token_file: Path | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    _nodes: list[NodeProcess] = field(default_factory=list)
    _pulsars: list[PrivatePulsar] = field(default_factory=list)
    _etcds: list[PrivateEtcd] = field(default_factory=list)
    _traffic: list[Traffic] = field(default_factory=list)
    _names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)

    def name(self, what: str) -> str:
        """A channel name or key prefix no other run uses."""
        name = f"chaos-{what}-{self.run_id}"
        self._names.append(name)
        return name

    @property
    def broker_admin_url(self) -> str | None:
        """The admin API of the broker at ``pulsar_url``: ``admin_url``, else derived
        from its port; for nodes that reach that broker another way (a fault proxy)."""
        return self.admin_url or admin_url_for(self.pulsar_url)

    def node(
        self, node_id: int, settings: Mapping[str, Any], command: Sequence[str] = SERVE
    ) -> NodeProcess:
        """A node process of this run (not started).

        A node's opener deletes its probe topics through the broker's admin API, which
        it finds from the service URL's port; behind a fault proxy or on another port
        it cannot, and would leave a probe topic per open on the broker. A node on the
        run's broker or on one of its private brokers is given that broker's; any other
        must name ``pulsar.admin_url`` (``None``: a broker it never reaches).
        """
        pulsar = dict(settings.get("pulsar", {}))
        url = pulsar.get("service_url", "")
        if "admin_url" not in pulsar:
            known: dict[str, str | None] = {p.url: p.admin_url for p in self._pulsars}
            known.setdefault(self.pulsar_url, self.broker_admin_url)
            admin = known.get(url) or admin_url_for(url)
            if admin is None:
                raise ValueError(
                    f"node {node_id}: the admin API of {url!r} cannot be derived from its "
                    "port; set pulsar.admin_url (None for a broker it never reaches)"
                )
            pulsar["admin_url"] = admin
        settings = {**settings, "pulsar": pulsar}
        if self.auth_token_file is not None:
            settings = {**settings, "auth": auth_section(self.auth_token_file)}
        node = NodeProcess(self.workdir / "nodes", node_id, settings, command=command)
        self._nodes.append(node)
        return node

    async def private_pulsar(self, *, stock: bool = False) -> PrivatePulsar:
        """A broker of this run; ``stock``: with Pulsar's default policies (the lent
        one if there is one: a broker's start costs a JVM's, and a stock broker's
        scenario never stops it)."""
        if stock and self.stock_pulsar is not None:
            await self.stock_pulsar.start()
            return self.stock_pulsar
        pulsar = PrivatePulsar(progress=self.say, stock=stock)
        self._pulsars.append(pulsar)
        await pulsar.start()
        return pulsar

    async def private_etcd(self) -> PrivateEtcd:
        etcd = PrivateEtcd(self.workdir / f"etcd-{len(self._etcds)}")
        self._etcds.append(etcd)
        await etcd.start()
        return etcd

    def traffic(self, channel: str, addresses: Iterable[str], **options: Any) -> Traffic:
        traffic = Traffic(channel, list(addresses), rng=self.rng, **options)
        self._traffic.append(traffic)
        return traffic

    async def check(
        self,
        result: ScenarioResult,
        traffic: Iterable[Traffic],
        pulsar_url: str | None = None,
        namespace: str = "default",
    ) -> None:
        """Stop ``traffic`` and run the checker on each channel once, against what all
        of its clients recorded; ``namespace``: the channels' (of tenant ``public``)."""
        traffic = list(traffic)
        for t in traffic:
            await t.stop()
        by_channel: dict[str, list[Traffic]] = {}
        for t in traffic:
            result.expect(not t.unexpected, f"{t.channel}: unexpected codes {t.unexpected[:3]}")
            result.expect(bool(t.acks), f"{t.channel}: no append was acknowledged")
            by_channel.setdefault(t.channel, []).append(t)
            codes = result.figures.setdefault("codes", {})
            for code, count in t.codes.items():
                codes[code] = codes.get(code, 0) + count
        for channel, clients in by_channel.items():
            report = await verify_channel(
                pulsar_url or self.pulsar_url,
                channel,
                acks=[a for t in clients for a in t.acks],
                failures=[f for t in clients for f in t.failures],
                batches=[b for t in clients for b in t.batches],
                namespace=namespace,
                admin_url=None if pulsar_url else self.admin_url,
            )
            result.absorb(channel, report)

    async def stop_nodes(self) -> None:
        """Stop traffic and the nodes (idempotent): before a scenario deletes topics of
        its own, which a node's producer still writing would create again."""
        for t in self._traffic:
            await t.stop()
        for node in self._nodes:
            await node.close()

    async def close(self) -> None:
        """Stop traffic, nodes, private brokers and etcds; safe to call after a failure."""
        await self.stop_nodes()
        for pulsar in self._pulsars:
            await pulsar.close()
        for etcd in self._etcds:
            await etcd.close()
        # TSO keys under the run's prefixes in the shared etcd (a name may also have
        # been a channel: deleting a prefix nobody wrote under costs nothing)
        await delete_tso_keys(self.etcd_endpoint, ["/" + n for n in self._names])
        if self.pulsar_admin_url is not None:  # likewise the channels' topics
            await delete_topics(
                self.pulsar_admin_url, [f"persistent://public/default/{n}" for n in self._names]
            )
