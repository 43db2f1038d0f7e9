"""The Pulsar backend: one topic per channel, an exclusive producer as the fence."""

from streamwal.adaptors.pulsar.channel import PulsarBackendWAL
from streamwal.adaptors.pulsar.config import PolicyAction, PulsarAccessMode, PulsarConfig
from streamwal.adaptors.pulsar.exclusivity import verify_exclusive_access
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.opener import PulsarOpener

__all__ = [
    "PolicyAction",
    "PulsarAccessMode",
    "PulsarBackendWAL",
    "PulsarConfig",
    "PulsarMessageId",
    "PulsarOpener",
    "verify_exclusive_access",
]
