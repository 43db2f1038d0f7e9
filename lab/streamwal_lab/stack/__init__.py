"""The local service stack: real Pulsar, etcd, OpenTelemetry Collector and Jaeger on loopback.

Installed on first use into the user's cache directory, started as background
processes whose pids are recorded in the stack folder, so ``down`` stops only what
``up`` started and tests reuse a stack that is already up.
"""

from streamwal_lab.stack.paths import StackPaths
from streamwal_lab.stack.service import Service, ServiceState
from streamwal_lab.stack.stack import Stack, StackInfo

__all__ = ["Service", "ServiceState", "Stack", "StackInfo", "StackPaths"]
