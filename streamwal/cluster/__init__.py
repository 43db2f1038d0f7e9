"""A cluster that runs itself through etcd: membership, a balancer that places
channels on live nodes and moves them when a node is lost, nodes that follow the
plan, and a client that follows its channels (docs/deploy.md)."""

from streamwal.cluster.client import ClusterClient
from streamwal.cluster.records import Assignment, ChannelStatus, ClusterKeys, MoveReason, NodeRecord
from streamwal.node.cluster_settings import ClusterSettings

__all__ = [
    "Assignment",
    "ChannelStatus",
    "ClusterClient",
    "ClusterKeys",
    "ClusterSettings",
    "MoveReason",
    "NodeRecord",
]
