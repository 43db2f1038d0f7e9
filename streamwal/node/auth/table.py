"""Which role each RPC of a node needs: the one table docs/auth.md shows.

Keyed by the full gRPC method name (``/package.Service/Method``), as the server sees
it. A method missing here is refused to everyone (an RPC added without a rule is
closed, not open), and a test fails for any RPC of the node's services that has no
row, so the next RPC gets one on purpose.

``channel``: the request's ``pchannel`` must start with one of the identity's channel
prefixes (when it has any): a plain string prefix, so ``team-a`` covers ``team-ab``
too (docs/auth.md says to end a prefix with a separator). An empty ``pchannel`` is
outside every prefix. ``audited``: every call is logged once with its caller,
channel and outcome (the admin calls: they fence, delete and truncate).
``listing``: the answer names channels; an identity limited to prefixes is shown
only the channels under them (another tenant's channel names are not its to read).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OPEN", "RULES", "Rule", "rule_rows"]

_NODE = "/streamwal.v1.StreamingNode/"
_ROUTING = "/streamwal.cluster.v1.ClusterRouting/"
_TSO = "/streamwal.tso.v1.TSO/"
_HEALTH = "/grpc.health.v1.Health/"

#: the roles of a call anyone may make, with no identity at all
OPEN: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Rule:
    """What a call of one method needs."""

    #: any of these roles lets an identity make the call; empty: open to everyone
    roles: frozenset[str]
    #: the request names a channel (``pchannel``) the identity's prefixes must cover
    channel: bool = True
    #: logged once per call in the audit log (identity, operation, channel, outcome)
    audited: bool = False
    #: the answer lists channels: filtered to the identity's prefixes
    listing: bool = False

    @property
    def open(self) -> bool:
        return not self.roles


def _admin() -> Rule:
    return Rule(frozenset({"admin"}), audited=True)


def _producer() -> Rule:
    return Rule(frozenset({"producer"}))


def _consumer() -> Rule:
    return Rule(frozenset({"consumer"}))


RULES: dict[str, Rule] = {
    # the channel's owner changes, or the channel or its log goes: admin
    _NODE + "AssignChannel": _admin(),
    _NODE + "RemoveChannel": _admin(),
    _NODE + "Truncate": _admin(),
    _NODE + "DeleteChannel": _admin(),
    # writes
    _NODE + "Produce": _producer(),
    _NODE + "ProduceStream": _producer(),
    _NODE + "ProduceBatch": _producer(),
    _NODE + "ProduceBatchStream": _producer(),
    _NODE + "BeginTxn": _producer(),
    _NODE + "CommitTxn": _producer(),
    _NODE + "RollbackTxn": _producer(),
    _NODE + "KeepAliveTxn": _producer(),
    # reads, a consumer's checkpoints, status
    _NODE + "Consume": _consumer(),
    _NODE + "ConsumeBatch": _consumer(),
    _NODE + "GetMVCC": _consumer(),
    _NODE + "Checkpoint": _consumer(),
    _NODE + "RemoveCheckpoint": _consumer(),
    _NODE + "GetRetention": _consumer(),
    _NODE + "ListChannels": Rule(frozenset({"consumer"}), channel=False, listing=True),
    # where a channel is served: whoever may use the channel may find it
    _ROUTING + "LookupChannel": Rule(frozenset({"admin", "producer", "consumer"})),
    # the nodes' own calls to each other: timestamps from the TSO leader
    _TSO + "AllocTimestamp": Rule(frozenset({"node"}), channel=False),
    # health and readiness stay open: probes carry no credentials
    _HEALTH + "Check": Rule(OPEN, channel=False),
    _HEALTH + "Watch": Rule(OPEN, channel=False),
    _HEALTH + "List": Rule(OPEN, channel=False),
}


def rule_rows() -> list[tuple[str, str, str, str]]:
    """The table as docs/auth.md shows it: service, method, roles, what is checked."""
    rows = []
    for full, rule in RULES.items():
        service, _, method = full.strip("/").partition("/")
        roles = " or ".join(sorted(rule.roles)) if rule.roles else "open"
        checks = []
        if rule.channel:
            checks.append("channel prefix")
        if rule.audited:
            checks.append("audited")
        if rule.listing:
            checks.append("answer filtered to the prefixes")
        rows.append((service, method, roles, ", ".join(checks) or "-"))
    return rows
