"""A Pulsar channel's entry limit has a floor the chunking layer may rely on."""

from __future__ import annotations

from streamwal.adaptors.pulsar.channel import ENVELOPE_RESERVE, PulsarBackendWAL
from streamwal.wal.chunking import MIN_ENTRY_BYTES, entry_budget


def test_a_pulsar_channels_entry_limit_never_goes_below_its_floor() -> None:
    """What lets the chunking layer trust ``min_entry_bytes`` for Pulsar channels."""
    assert PulsarBackendWAL.min_entry_bytes == MIN_ENTRY_BYTES
    for broker_limit in (1, 64 * 1024, MIN_ENTRY_BYTES, 5 * 1024 * 1024):
        assert entry_budget(broker_limit, ENVELOPE_RESERVE) >= PulsarBackendWAL.min_entry_bytes
