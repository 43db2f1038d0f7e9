"""The streaming node: service, client, configuration, telemetry and trace views.

A node process is assembled from it (and the cluster) in :mod:`streamwal.server`.

Its configuration defaults to the ports of the lab's local stack, so ``streamwal
serve`` with no config runs against it; the stack itself is the lab's
(``streamwal-lab``), which nothing here imports.
"""
