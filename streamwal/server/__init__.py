"""A node process assembled: the node's service, its TSO access and, with
``cluster.enabled``, its cluster membership and routing (:mod:`streamwal.server.runtime`),
and ``streamwal serve``, which runs one (:mod:`streamwal.server.serve`).

This is the one layer that imports both :mod:`streamwal.node` and
:mod:`streamwal.cluster`; neither imports it (``docs/architecture.md``).
"""
