"""An in-process backend: the same contract as Pulsar, for unit tests and examples."""

from streamwal.adaptors.memory.backend import (
    MemoryBackendWAL,
    MemoryFaults,
    MemoryLogStore,
    MemoryMessageId,
    MemoryOpener,
)

__all__ = ["MemoryBackendWAL", "MemoryFaults", "MemoryLogStore", "MemoryMessageId", "MemoryOpener"]
