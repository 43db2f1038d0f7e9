"""The Pulsar backend: one topic per channel, an exclusive producer as the fence."""

from adaptors.pulsar.channel import PulsarBackendWAL
from adaptors.pulsar.config import PolicyAction, PulsarAccessMode, PulsarConfig
from adaptors.pulsar.exclusivity import verify_exclusive_access
from adaptors.pulsar.message_id import PulsarMessageId
from adaptors.pulsar.opener import PulsarOpener

__all__ = [
    "PolicyAction",
    "PulsarAccessMode",
    "PulsarBackendWAL",
    "PulsarConfig",
    "PulsarMessageId",
    "PulsarOpener",
    "verify_exclusive_access",
]
