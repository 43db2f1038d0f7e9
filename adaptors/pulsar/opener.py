"""The Pulsar backend's entry point.

Each channel opened for writing gets a Pulsar client of its own (as newest Milvus
gives each WAL producer one). A client has one connection per broker, and a broker
closes a whole connection when a message comes on it for a producer it no longer has
("Received message, but the producer is not ready ... Closing the connection"): the
sends a fenced producer had in flight. On a shared client every other channel's
producer then reconnected and resent what it had in flight, which deduplication
answered with no position, at each move of a written channel. The opener's own
client serves readers (they send nothing a broker could refuse that way), the
exclusivity check and tools.
"""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path
from typing import Any

import pulsar
from pulsar import asyncio as pulsar_asyncio
from pulsar.asyncio import PulsarException

from adaptors.pulsar.channel import PulsarBackendWAL
from adaptors.pulsar.config import PulsarConfig
from adaptors.pulsar.errors import translate
from adaptors.pulsar.exclusivity import verify_exclusive_access
from adaptors.pulsar.message_id import PulsarMessageId
from wal.backend import AccessMode, validate_channel_name
from wal.errors import ClosedError, ExclusivityNotEnforcedError, UnavailableError

__all__ = ["PulsarOpener", "client_logger"]

_log = logging.getLogger(__name__)


def client_logger(log_file: str | None = None) -> logging.Logger | pulsar.FileLogger:
    """The C++ client's logger: native into ``log_file`` (warnings and errors), else
    Python's "pulsar.client" at WARNING (it logs every reconnect at INFO).

    See :attr:`PulsarConfig.client_log_file` for what the Python logger costs.
    """
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        return pulsar.FileLogger(pulsar.LoggerLevel.Warn, log_file)
    logger = logging.getLogger("pulsar.client")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    return logger


class PulsarOpener:
    """Opens channels on one Pulsar cluster.

    ``start()`` creates the client (the first connection happens lazily);
    :meth:`open` does no I/O; the first write on any channel runs the exclusivity
    self-check once per opener, so an unreachable broker shows up as a failed
    write attempt rather than as a failed open. A broker found not to enforce
    exclusivity is refused for the opener's lifetime: the check is not run again
    (each run would leave another probe topic behind), the refusal is raised again.
    """

    name = "pulsar"

    def __init__(self, config: PulsarConfig | None = None) -> None:
        self.config = config or PulsarConfig()
        self._client: Any = None
        self._verified = False
        self._refusal: ExclusivityNotEnforcedError | None = None
        self._verify_lock = asyncio.Lock()
        self._closed = False
        self._channels: set[PulsarBackendWAL] = set()

    async def start(self) -> None:
        if self._client is not None:
            return
        self._client = self._new_client()

    def _new_client(self) -> Any:
        """A client (no I/O: it connects on first use)."""
        cfg = self.config
        options: dict[str, Any] = {
            "operation_timeout_seconds": max(1, math.ceil(cfg.operation_timeout_s)),
            "connection_timeout_ms": int(cfg.operation_timeout_s * 1000),
            "logger": client_logger(cfg.client_log_file),
        }
        if cfg.auth_token:
            options["authentication"] = pulsar.AuthenticationToken(cfg.auth_token)
        if cfg.tls_trust_certs_file:
            options["tls_trust_certs_file_path"] = cfg.tls_trust_certs_file
        if cfg.service_url.startswith("pulsar+ssl://"):
            options["tls_allow_insecure_connection"] = cfg.tls_allow_insecure
            options["tls_validate_hostname"] = cfg.tls_validate_hostname
        return pulsar_asyncio.Client(cfg.service_url, **options)

    async def __aenter__(self) -> PulsarOpener:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def client(self) -> Any:
        """The underlying ``pulsar.asyncio.Client`` (tools and tests use it)."""
        if self._client is None:
            raise ClosedError("PulsarOpener is not started")
        return self._client

    async def open(self, channel: str, mode: AccessMode) -> PulsarBackendWAL:
        if self._closed:
            raise ClosedError("PulsarOpener is closed")
        validate_channel_name(channel)
        if self._client is None:
            await self.start()
        wal = PulsarBackendWAL(
            self._client,
            self.config,
            channel,
            mode,
            self.verify_exclusivity,
            on_close=self._channels.discard,
            writer_client=self._new_client() if mode is AccessMode.READ_WRITE else None,
        )
        self._channels.add(wal)
        return wal

    async def verify_exclusivity(self) -> None:
        """Run the exclusivity self-check once (see :mod:`adaptors.pulsar.exclusivity`).

        A pass and a refusal are both remembered; an unavailable broker is not (the
        next write attempt checks again). Since a refusal is final for the opener, it
        is confirmed on a second, fresh probe topic first: one probe can be misled by
        its topic changing under it (deleted by an admin and auto-created again while
        its fenced producer reconnects, which then writes to the new topic); a broker
        that really ignores access modes fails both.
        """
        if self._verified or not self.config.verify_exclusivity:
            return
        if self._refusal is not None:
            raise self._refused()
        async with self._verify_lock:
            if self._verified:
                return
            if self._refusal is not None:
                raise self._refused()
            try:
                await self._probe()
            except ExclusivityNotEnforcedError as first:
                _log.warning("exclusivity check failed (%s); checking again on a new topic", first)
                try:
                    await self._probe()
                except ExclusivityNotEnforcedError as exc:
                    self._refusal = exc
                    raise
            self._verified = True

    async def _probe(self) -> None:
        prefix = f"persistent://{self.config.tenant}/{self.config.namespace}/"
        try:
            await asyncio.wait_for(
                verify_exclusive_access(self.client, prefix, self.config.service_url),
                timeout=self.config.operation_timeout_s * 3,
            )
        except TimeoutError as exc:
            raise UnavailableError(
                f"broker {self.config.service_url} did not answer the exclusivity check "
                f"within {self.config.operation_timeout_s * 3:g}s"
            ) from exc
        except PulsarException as exc:
            raise translate(exc, channel="(exclusivity probe)", what="probe") from exc

    def _refused(self) -> ExclusivityNotEnforcedError:
        # a fresh error each time: re-raising one instance would grow its traceback
        assert self._refusal is not None
        return ExclusivityNotEnforcedError(*self._refusal.args)

    def message_id_from_bytes(self, data: bytes) -> PulsarMessageId:
        return PulsarMessageId.from_bytes(data)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for channel in list(self._channels):
            await channel.close()
        self._channels.clear()
        client, self._client = self._client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), timeout=self.config.operation_timeout_s)
            except Exception:
                pass  # unreachable broker: the client is gone either way
