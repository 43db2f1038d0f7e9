"""The streaming node: service, client, configuration, telemetry and trace views.

A node process is assembled from it (and the cluster) in :mod:`streamwal.server`.

Its configuration defaults to Pulsar's and etcd's standard local endpoints, so
``streamwal serve`` with no config runs against a stock Pulsar and etcd on this
machine, or against those :mod:`streamwal.environment` names (the lab's local stack
exports its own ports that way; nothing here imports the lab).
"""
