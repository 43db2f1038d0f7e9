"""The WAL's tunables, validated once at construction.

Defaults follow the Milvus streaming node: first-time-tick retry 20 ms x2 up to 5 s,
append retry 10 ms x2 up to 5 s, scanner retry 100 ms x2 up to 5 s, a time tick every
200 ms, a 64 MiB write-ahead buffer whose entries live 30 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from streamwal.backoff import Backoff
from streamwal.backoff import check_positive as _positive
from streamwal.errors import ConfigError

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "Backoff", "WALConfig"]

#: the default largest message (its payload): what a node's gRPC limits are sized for
#: when they cannot see the node's own setting (a client's)
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WALConfig:
    """Everything a WAL can be tuned with; every field is validated here. Seconds
    throughout; a node's ``wal:`` section builds this object (same names).

    - ``first_time_tick_backoff``: retries of the first time tick on open (unbounded by
      default: the open ends on success, a fenced error, a broker that does not
      enforce exclusivity, or cancellation).
    - ``append_backoff``: retries of an append after a retriable error; bounded.
    - ``scanner_backoff``: a scanner reopening the backend after a retriable error.
    - ``time_tick_interval``: seconds between periodic time ticks.
    - ``buffer_capacity_bytes`` / ``buffer_keepalive``: bounds of the write-ahead buffer.
    - ``close_timeout``: how long ``close()`` waits for each step (in-flight appends,
      the backend) before going on.
    - ``retention``: seconds of log kept in any case; the owner truncates what is older
      and also behind every registered consumer's checkpoint
      (:mod:`streamwal.wal.retention_contract`).
      ``None`` (default): never truncate.
    - ``truncate_interval``: seconds between the owner's truncation rounds (which also
      record each consumer's lag), when ``retention`` is set.
    - ``idempotence_window``: sequence numbers remembered per producer id; a retry
      older than that gets :class:`~streamwal.errors.SequenceTooOldError`.
    - ``idempotence_producers``: producer ids remembered; the least recently used
      expires first.
    - ``idempotence_rebuild_window``: how far back (seconds of publish time) a new owner
      reads the log's tail to rebuild the producers' windows; a retry of an append
      older than that, after a change of owner, may be appended again.
    - ``idempotence_rebuild_timeout``: bound of that read (appends with a producer id
      wait for it).
    - ``max_message_bytes``: the largest payload of one message (64 MiB): larger is
      refused with :class:`~streamwal.errors.InvalidInputError`. A message too large
      for one backend entry is written as chunks (:mod:`streamwal.wal.chunking`); the
      node's gRPC message limits derive from this value.
    - ``txn_keepalive``: a transaction's timeout when its begin names none: without an
      append or a keepalive for that long (elapsed time on the owner, not TSO time), it
      is rolled back.
    - ``log_format``: the log format an owner writes, ``"v2"`` (default: the caller's
      properties and type verbatim, packs, terms) or ``"v1"`` (for a log that readers of
      streamwal before format v2 must still read; it refuses caller property keys
      starting with ``_`` and types outside its names). A cluster member ignores it and
      writes v2 only once every registered node reads v2. Both are always read
      (``docs/wire-format.md``).
    - ``pack_appends``: in log format v2, write the appends the WAL has in hand at one
      send (a batch, the appends of one event-loop iteration) as one backend entry,
      a pack, rather than one entry each: one send and one answer for all of them. It
      asks the backend to write one entry per send (the Pulsar backend turns its
      client's batching off for the channel's producer). ``False``: one entry per
      message (the producer batching as ``pulsar.batching`` says).
    """

    first_time_tick_backoff: Backoff = field(
        default_factory=lambda: Backoff(initial=0.02, maximum=5.0)
    )
    append_backoff: Backoff = field(
        default_factory=lambda: Backoff(initial=0.01, maximum=5.0, max_attempts=10)
    )
    scanner_backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.1, maximum=5.0))
    time_tick_interval: float = 0.2
    buffer_capacity_bytes: int = 64 * 1024 * 1024
    buffer_keepalive: float = 30.0
    close_timeout: float = 5.0
    retention: float | None = None
    truncate_interval: float = 60.0
    idempotence_window: int = 1024
    idempotence_producers: int = 10_000
    idempotence_rebuild_window: float = 600.0
    idempotence_rebuild_timeout: float = 30.0
    txn_keepalive: float = 10.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    log_format: str = "v2"
    pack_appends: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.pack_appends, bool):
            raise ConfigError("pack_appends", f"must be a bool, got {self.pack_appends!r}")
        if self.log_format not in ("v1", "v2"):
            raise ConfigError("log_format", f"must be 'v1' or 'v2', got {self.log_format!r}")
        for name in ("first_time_tick_backoff", "append_backoff", "scanner_backoff"):
            if not isinstance(getattr(self, name), Backoff):
                raise ConfigError(name, "must be a Backoff")
        _positive("time_tick_interval", self.time_tick_interval)
        _positive("buffer_keepalive", self.buffer_keepalive)
        _positive("close_timeout", self.close_timeout)
        _positive("truncate_interval", self.truncate_interval)
        _positive("idempotence_rebuild_window", self.idempotence_rebuild_window)
        _positive("idempotence_rebuild_timeout", self.idempotence_rebuild_timeout)
        _positive("txn_keepalive", self.txn_keepalive)
        for name in ("idempotence_window", "idempotence_producers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(name, f"must be a positive int, got {value!r}")
        if self.retention is not None and (
            not isinstance(self.retention, int | float)
            or isinstance(self.retention, bool)
            or not math.isfinite(self.retention)
            or self.retention < 0
        ):
            raise ConfigError(
                "retention", f"must be None or a number of seconds >= 0, got {self.retention!r}"
            )
        if (
            not isinstance(self.max_message_bytes, int)
            or isinstance(self.max_message_bytes, bool)
            or self.max_message_bytes < 1
        ):
            raise ConfigError(
                "max_message_bytes", f"must be a positive int, got {self.max_message_bytes!r}"
            )
        if not isinstance(self.buffer_capacity_bytes, int) or self.buffer_capacity_bytes < 1:
            raise ConfigError(
                "buffer_capacity_bytes",
                f"must be a positive int, got {self.buffer_capacity_bytes!r}",
            )
