"""The streaming node: service, CLI, configuration, telemetry and trace views.

Its configuration defaults to the ports of the lab's local stack, so ``streamwal
serve`` with no config runs against it; the stack itself is the lab's
(``streamwal-lab``), which nothing here imports.
"""
