"""The Pulsar backend's entry point.

Channels opened for writing take their client from :mod:`.clients` (one each, or a
few shared: ``pulsar.writer_clients``). The opener's own client serves readers (they
send nothing a broker could refuse by closing their connection), the exclusivity
check and tools.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pulsar
from pulsar import asyncio as pulsar_asyncio
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.admin import PulsarAdmin, admin_url_for, require_topic
from streamwal.adaptors.pulsar.channel import PulsarBackendWAL
from streamwal.adaptors.pulsar.client_check import check_client
from streamwal.adaptors.pulsar.clients import WriterClients
from streamwal.adaptors.pulsar.config import PolicyAction, PulsarConfig
from streamwal.adaptors.pulsar.cursor import hold_log
from streamwal.adaptors.pulsar.deduplication import deduplication_enforced
from streamwal.adaptors.pulsar.deletion import delete_topic
from streamwal.adaptors.pulsar.errors import translate
from streamwal.adaptors.pulsar.exclusivity import probe_topic, verify_exclusive_access
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.policies import (
    DEDUPLICATION,
    PolicyFinding,
    enforce,
    inspect_topic,
    refusal,
    topic_state,
)
from streamwal.adaptors.pulsar.retention import TopicRetention
from streamwal.errors import (
    ClosedError,
    ExclusivityNotEnforcedError,
    MisconfiguredError,
    StreamwalError,
    UnavailableError,
)
from streamwal.lifecycle import Startable
from streamwal.timeouts import within
from streamwal.wal.backend import AccessMode, validate_channel_name

#: the topic whose metadata :meth:`PulsarOpener.check_reachable` asks for (never created)
REACHABILITY_TOPIC = "streamwal-reachability"

__all__ = ["PulsarOpener", "client_logger"]

_log = logging.getLogger(__name__)

_T = TypeVar("_T")


async def _all(*steps: Awaitable[Any]) -> list[Any]:
    """Await every step to its end; then raise the first one's error, in order."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


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


class PulsarOpener(Startable):
    """Opens channels on one Pulsar cluster.

    ``start()`` creates the client (the first connection happens lazily);
    :meth:`open` does no I/O; the first write on any channel runs the broker
    self-checks once per opener (exclusivity, then deduplication), so an unreachable
    broker shows up as a failed write attempt rather than as a failed open. A broker
    found not to enforce exclusivity is refused for the opener's lifetime: the check
    is not run again, the refusal is raised again. Probe topics are deleted through
    the admin API when there is one (else the broker's inactive-topic deletion takes
    them: they have no subscription).

    Before a channel's first time tick, :meth:`prepare_topic` gives it its durable cursor
    and checks the broker policies applied to its topic (:mod:`.policies`).
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
        self._writer_clients = WriterClients(
            self._new_client, self.config.writer_clients, self.config.operation_timeout_s
        )
        self._deduplication_checked = False
        self._limits_read = False
        self._broker_max_message_size: int | None = None
        admin_url = self.config.admin_url or admin_url_for(self.config.service_url)
        self.admin: PulsarAdmin | None = None
        if admin_url:
            self.admin = PulsarAdmin(
                admin_url,
                token=self.config.auth_token,
                trust_certs_file=self.config.tls_trust_certs_file,
                allow_insecure=self.config.tls_allow_insecure,
                timeout=self.config.operation_timeout_s,
            )

    async def start(self) -> None:
        if self._client is not None:
            return
        check_client()
        self._client = self._new_client()

    def _new_client(self) -> Any:
        """A client (no I/O: it connects on first use)."""
        from streamwal.adaptors.pulsar.client_log import client_log_target

        cfg = self.config
        options: dict[str, Any] = {
            "operation_timeout_seconds": max(1, math.ceil(cfg.operation_timeout_s)),
            "connection_timeout_ms": int(cfg.operation_timeout_s * 1000),
            # expected fence lines at DEBUG for library users (adaptors.pulsar.client_log)
            "logger": client_log_target(cfg.client_log_file),
        }
        if cfg.auth_token:
            options["authentication"] = pulsar.AuthenticationToken(cfg.auth_token)
        if cfg.tls_trust_certs_file:
            options["tls_trust_certs_file_path"] = cfg.tls_trust_certs_file
        if cfg.service_url.startswith("pulsar+ssl://"):
            options["tls_allow_insecure_connection"] = cfg.tls_allow_insecure
            options["tls_validate_hostname"] = cfg.tls_validate_hostname
        return pulsar_asyncio.Client(cfg.service_url, **options)

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
            self.verify_broker,
            prepare_topic=self.prepare_topic,
            retention=TopicRetention(
                self.admin, self.config.topic(channel), channel, self.config.cursor_subscription
            ),
            on_close=self._channels.discard,
            writer_client=self._writer_clients.take() if mode is AccessMode.READ_WRITE else None,
            give_back_writer_client=self._writer_clients.give_back,
        )
        wal.message_size_limit = self.max_message_size
        self._channels.add(wal)
        return wal

    async def require_channel(self, channel: str) -> None:
        """The :class:`~streamwal.wal.backend.ChannelDirectory` check, asked of the admin
        API (a reader would create the topic). Without an admin API nothing can be
        asked without creating the topic, so the channel is taken to exist."""
        validate_channel_name(channel)
        if self.admin is not None:
            await require_topic(self.admin, self.config.topic(channel), channel)

    async def verify_broker(self) -> None:
        """The self-checks a first write runs: exclusivity, then deduplication; and
        the broker's message size limit, read once."""
        await self.verify_exclusivity()
        await self.verify_deduplication()
        await self.read_broker_limits()

    async def check_reachable(self) -> None:
        """One round trip to the broker, cheap enough to repeat every few seconds: the
        partitioned metadata of a topic nobody writes (the broker answers it from its
        metadata store and creates nothing), bounded by the operation timeout. A node
        serving channels asks it to notice that it lost its broker
        (:class:`UnavailableError`), which its writers alone would only say per append.
        """
        topic = f"persistent://{self.config.tenant}/{self.config.namespace}/{REACHABILITY_TOPIC}"
        try:
            await within(
                self.client.get_topic_partitions(topic), timeout=self.config.operation_timeout_s
            )
        except PulsarException as exc:
            raise UnavailableError(
                f"broker {self.config.service_url} did not answer a metadata request: {exc.error()}"
            ) from exc
        except TimeoutError as exc:
            raise UnavailableError(
                f"broker {self.config.service_url} did not answer a metadata request "
                f"within {self.config.operation_timeout_s:g}s"
            ) from exc

    async def read_broker_limits(self) -> None:
        """Read the broker's ``maxMessageSize`` (runtime configuration, admin API) once.

        The client refuses an entry over what the broker announced on connecting, but
        does not tell the application that number; chunking must stay under it, so it
        is asked here, before this opener's first write. Without an admin API, or if
        the broker will not say (no admin rights), ``max_message_size`` of the
        configuration stands, and a warning says so.
        """
        if self._limits_read:
            return
        self._limits_read = True
        if self.admin is None:
            return
        try:
            runtime = await self.admin.get("brokers/configuration/runtime")
            announced = int(runtime["maxMessageSize"])
        except (StreamwalError, KeyError, TypeError, ValueError) as exc:
            _log.warning(
                "the broker's maxMessageSize could not be read (%r); chunking keeps "
                "pulsar.max_message_size = %d",
                exc,
                self.config.max_message_size,
            )
            return
        if announced > 0:
            self._broker_max_message_size = announced

    def max_message_size(self) -> int:
        """The largest entry this opener sends: the configured ``max_message_size``, or
        the broker's limit if that is smaller."""
        announced = self._broker_max_message_size
        configured = self.config.max_message_size
        return configured if announced is None else min(configured, announced)

    async def verify_deduplication(self) -> None:
        """Probe once per opener that the namespace drops a resent sequence id.

        A pass is remembered, and so is a ``warn`` (warned once); a refusal is not:
        an operator who enables deduplication is not asked to restart the node.
        """
        action = self.config.on_no_deduplication
        if self._deduplication_checked or action is PolicyAction.IGNORE:
            return
        async with self._verify_lock:
            if self._deduplication_checked:
                return
            timeout = self.config.operation_timeout_s
            enforced = await self._on_probe_topic(
                "deduplication",
                "deduplication probe",
                lambda topic: deduplication_enforced(self.client, topic, timeout),
                timeout,  # each step's bound: deduplication_enforced applies it
            )
            if not enforced:
                namespace = f"{self.config.tenant}/{self.config.namespace}"
                finding = PolicyFinding(
                    DEDUPLICATION,
                    f"broker deduplication is off in namespace {namespace}: the broker "
                    "wrote a resent sequence id twice, so a producer that reconnects would "
                    "write an entry again behind later ones",
                    f"pulsar-admin namespaces set-deduplication {namespace} --enable "
                    "(or brokerDeduplicationEnabled=true)",
                )
                if action is PolicyAction.REFUSE:
                    raise refusal(f"(namespace {namespace})", [finding])
                _log.warning("%s (fix: %s)", finding.detail, finding.fix)
            self._deduplication_checked = True

    async def prepare_topic(
        self, channel: str, topic: str, fence: Awaitable[None] | None = None
    ) -> None:
        """Give ``topic`` the WAL's durable cursor and check its policies (module doc),
        running ``fence`` (the takeover, if any) beside it.

        Runs before the channel's first time tick: no acknowledged entry exists
        without the cursor. The topic's state is read first, beside the fence, so a
        cursor someone deleted is seen before it is created again; once the topic
        exists, the cursor and the policy reads go side by side.
        """
        cfg = self.config
        admin = self.admin if cfg.on_unsafe_policy is not PolicyAction.IGNORE else None
        hold = functools.partial(
            hold_log, self.client, topic, cfg.cursor_subscription, cfg.operation_timeout_s
        )
        if admin is None:
            await _all(*([] if fence is None else [fence]))
            await hold()
            return
        before_state = topic_state(admin, topic, cfg.cursor_subscription)
        if fence is None:
            before = await before_state
        else:
            _, before = await _all(fence, before_state)
        inspect = inspect_topic(admin, topic, cfg.cursor_subscription, before)
        if fence is not None or before.exists:
            _, findings = await _all(hold(), inspect)
        else:  # the cursor creates the topic, whose policies can be read only then
            await hold()
            findings = await inspect
        enforce(
            channel,
            findings,
            unsafe=cfg.on_unsafe_policy,
            no_deduplication=cfg.on_no_deduplication,
        )

    async def _delete_probe(self, topic: str) -> None:
        if self.admin is None:
            return
        try:
            # forced: the broker may still count a probe producer whose close it has
            # answered ("412 Topic has 1 connected producers"); nobody else uses the topic
            await self.admin.delete(f"{PulsarAdmin.topic_path(topic)}?force=true")
        except (StreamwalError, FileExistsError) as exc:
            _log.info("could not delete the probe topic %s: %s", topic, exc)

    async def verify_exclusivity(self) -> None:
        """Run the exclusivity self-check once (see :mod:`streamwal.adaptors.pulsar.exclusivity`).

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
        bound = self.config.operation_timeout_s * 3
        await self._on_probe_topic(
            "exclusivity",
            "exclusivity check",
            lambda topic: within(
                verify_exclusive_access(self.client, prefix, self.config.service_url, topic=topic),
                timeout=bound,
            ),
            bound,
        )

    async def _on_probe_topic(
        self, what: str, label: str, probe: Callable[[str], Awaitable[_T]], bound: float
    ) -> _T:
        """Run ``probe`` on a fresh topic of the namespace and delete the topic after;
        a timeout (``bound``: the seconds it had) or a client error becomes a typed one."""
        prefix = f"persistent://{self.config.tenant}/{self.config.namespace}/"
        topic = probe_topic(prefix, what)
        try:
            return await probe(topic)
        except TimeoutError as exc:
            raise UnavailableError(
                f"broker {self.config.service_url} did not answer the {label} on {topic} "
                f"within {bound:g}s{await self._unreachable()}"
            ) from exc
        except PulsarException as exc:
            error = translate(exc, channel=topic, what=label)
            if type(error) is UnavailableError:  # the client's timeout may hide a refusal
                error = UnavailableError(f"{error}{await self._unreachable()}")
            raise error from exc
        finally:
            await self._delete_probe(topic)

    async def _unreachable(self) -> str:
        """Why the broker did not answer, when a plain connection tells: the client
        reports a refused connection as a timeout once its retries ran out."""
        for host_port in self.config.service_url.partition("://")[2].split(","):
            host, _, port = host_port.strip().rstrip("/").rpartition(":")
            try:
                _reader, writer = await within(
                    asyncio.open_connection(host.strip("[]"), int(port)), timeout=2.0
                )
            except ConnectionRefusedError:
                return f" (connection refused at {host}:{port}: nothing listens there)"
            except (OSError, TimeoutError, ValueError) as exc:
                return f" (cannot connect to {host}:{port}: {type(exc).__name__}: {exc})"
            writer.close()
        return ""

    def _refused(self) -> ExclusivityNotEnforcedError:
        # a fresh error each time: re-raising one instance would grow its traceback
        assert self._refusal is not None
        return ExclusivityNotEnforcedError(*self._refusal.args)

    async def delete_log(self, channel: str) -> int | None:
        """Delete ``channel``'s topic and its subscriptions (:mod:`.deletion`; the
        :class:`~streamwal.wal.deletion.ChannelDeleter` ability)."""
        validate_channel_name(channel)
        if self.admin is None:
            raise MisconfiguredError(
                f"channel {channel!r}: deleting a channel needs the broker's admin API; "
                "set pulsar.admin_url"
            )
        return await delete_topic(self.admin, self.config.topic(channel), channel)

    def message_id_from_bytes(self, data: bytes) -> PulsarMessageId:
        return PulsarMessageId.from_bytes(data)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for channel in list(self._channels):
            await channel.close()
        self._channels.clear()
        await self._writer_clients.close()
        client, self._client = self._client, None
        if client is not None:
            try:
                await within(client.close(), timeout=self.config.operation_timeout_s)
            except Exception:
                pass  # unreachable broker: the client is gone either way
