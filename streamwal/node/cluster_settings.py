"""The ``cluster:`` section of a node's file: membership, the balancer, the channel set.

Off by default: a node without it is driven by ``AssignChannel`` calls as before.
Times are seconds. The lease TTL bounds how long a dead node looks alive; the grace
period is how much longer the balancer waits before moving its channels (Milvus's
``walBalancer.nodeLostGracePeriod``, 5 s by default there too). Both are for a node
that may only be slow; a killed node is found by its refused port much sooner
(:mod:`streamwal.cluster.liveness`).

It is declared here, beside the node's other sections (:mod:`streamwal.node.config`),
because the node's file holds it: the cluster layer, above the node, reads it from
there (``docs/architecture.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from streamwal.errors import ConfigError
from streamwal.tso.config import DEFAULT_KEY_PREFIX, key_prefix_path
from streamwal.wal.backend import validate_channel_name

__all__ = ["ClusterSettings"]


@dataclass(frozen=True)
class ClusterSettings:
    #: membership, balancing and failover through etcd; off: channels are assigned by RPC
    enabled: bool = False
    #: the cluster's keys are ``<key_prefix>/cluster/...`` in etcd
    key_prefix: str = DEFAULT_KEY_PREFIX
    #: the node's session lease; a killed node is seen gone after at most this long
    lease_ttl_s: int = 5
    #: how long after a node's lease is gone its channels are moved
    grace_period_s: float = 5.0
    #: whether this node campaigns to run the balancer (one runs at a time)
    balancer: bool = True
    #: channels the cluster serves, written to etcd by the first balancer only;
    #: later changes go through ``streamwal cluster channels add/remove``
    channels: tuple[str, ...] = ()
    #: channels moved per balancing round when a node joins (failover is not bounded)
    max_moves_per_round: int = 1
    #: how often the balancer plans
    round_interval_s: float = 0.5
    #: how often a node reads its assignments
    poll_interval_s: float = 0.2
    #: how long an owner may keep failing to open a channel before the balancer moves
    #: it to another ready node; doubled for each such move of the same channel in a
    #: row (up to 16 times), so a broken broker does not make channels bounce
    open_failure_bound_s: float = 10.0
    #: how often every node connects to each other node's advertised address, to find
    #: a killed node before its lease runs out
    probe_interval_s: float = 0.25
    #: refusals in a row that make a node dead: its lease is revoked and its channels
    #: move without the grace (``0``: no probes, the lease alone)
    probe_refusals: int = 2

    def check(self) -> None:
        try:  # the rule of every etcd prefix a node's file gives: taken as written
            key_prefix_path(self.key_prefix, exact=True)
        except ConfigError as exc:
            raise ConfigError("cluster.key_prefix", exc.problem) from None
        if self.lease_ttl_s < 1:
            raise ConfigError("cluster.lease_ttl_s", "must be >= 1")
        if self.grace_period_s < 0:
            raise ConfigError("cluster.grace_period_s", "must be >= 0")
        if self.probe_refusals < 0:
            raise ConfigError("cluster.probe_refusals", "must be >= 0 (0: no probes)")
        if self.max_moves_per_round < 1:
            raise ConfigError("cluster.max_moves_per_round", "must be >= 1")
        for name in (
            "round_interval_s",
            "poll_interval_s",
            "open_failure_bound_s",
            "probe_interval_s",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"cluster.{name}", "must be > 0")
        for i, channel in enumerate(self.channels):
            try:
                validate_channel_name(channel)
            except ValueError as exc:
                raise ConfigError(f"cluster.channels[{i}]", str(exc)) from None
