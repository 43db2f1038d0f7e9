"""One streaming node: TSO access, the Pulsar opener, its channels and its gRPC server.

Start order: TSO (in-process oracle campaigns, or a remote allocator), the backend
opener, the gRPC server. Stop order (bounded at each step): health NOT_SERVING and
stop accepting; let in-flight RPCs finish within the grace period; close every WAL
(each waits for its in-flight appends); close the opener; close the TSO.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.instrumentation.grpc import aio_server_interceptor

from adaptors.pulsar import PulsarAccessMode, PulsarConfig, PulsarOpener
from node.channels import ChannelManager
from node.config import NodeConfig
from node.proto import streaming_pb2_grpc as pb_grpc
from node.servicer import StreamingNodeServicer
from tso import InProcessTSO, LocalAllocator, RemoteSource, TsoConfig, add_tso_servicer
from wal.config import Backoff, WALConfig
from wal.errors import ClosedError

__all__ = ["Node", "pulsar_config", "tso_config", "wal_config"]

_log = logging.getLogger(__name__)

SERVICE_NAME = "streamwal.v1.StreamingNode"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def pulsar_config(config: NodeConfig) -> PulsarConfig:
    p = config.pulsar
    return PulsarConfig(
        service_url=p.service_url,
        tenant=p.tenant,
        namespace=p.namespace,
        access_mode=PulsarAccessMode(p.access_mode),
        operation_timeout_s=p.operation_timeout_s,
        auth_token=p.auth_token,
        tls_trust_certs_file=p.tls_trust_certs_file,
        tls_allow_insecure=p.tls_allow_insecure,
        tls_validate_hostname=p.tls_validate_hostname,
    )


def tso_config(config: NodeConfig) -> TsoConfig:
    t = config.tso
    return TsoConfig(
        etcd_endpoints=config.etcd.endpoints,
        key_prefix=t.key_prefix,
        lease_ttl_s=t.lease_ttl_s,
        save_window_s=t.save_window_s,
        update_interval_s=t.update_interval_ms / 1000,
        batch_size=t.batch_size,
    )


def wal_config(config: NodeConfig) -> WALConfig:
    w = config.wal
    return WALConfig(
        first_time_tick_backoff=Backoff(
            initial=w.first_time_tick_initial_ms / 1000,
            maximum=w.first_time_tick_max_ms / 1000,
            multiplier=w.first_time_tick_multiplier,
        ),
        append_backoff=Backoff(
            initial=w.append_retry_initial_ms / 1000,
            maximum=w.append_retry_max_ms / 1000,
            max_attempts=w.append_retry_attempts,
        ),
        time_tick_interval=w.time_tick_interval_ms / 1000,
        buffer_capacity_bytes=w.buffer_capacity_bytes,
        buffer_keepalive=w.buffer_keepalive_s,
    )


class Node:
    """``async with Node(config) as node``; ``node.port`` is the bound gRPC port."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self._tso: InProcessTSO | None = None
        self._remote: RemoteSource | None = None
        self._opener: PulsarOpener | None = None
        self._channels: ChannelManager | None = None
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._port = 0
        self._closed = False

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        host = self.config.node.listen.rpartition(":")[0]
        return f"{host}:{self._port}"

    @property
    def channels(self) -> ChannelManager:
        if self._channels is None:
            raise ClosedError("node not started")
        return self._channels

    def _allocator_factory(self) -> Callable[[], LocalAllocator]:
        if self._tso is not None:
            tso = self._tso
            return tso.allocator
        remote = self._remote
        if remote is None:
            raise ClosedError("node not started")
        batch = self.config.tso.batch_size
        return lambda: LocalAllocator(remote, batch)

    async def start(self) -> None:
        cfg = self.config
        self._server = grpc.aio.server(
            interceptors=[aio_server_interceptor()],  # type: ignore[no-untyped-call]
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self._port = self._bind(self._server)
        try:
            if cfg.tso.mode == "in-process":
                self._tso = InProcessTSO(tso_config(cfg), address=self.address)
                await self._tso.start()
                add_tso_servicer(self._server, self._tso.oracle)
            else:
                self._remote = RemoteSource(cfg.tso.remote_addresses)
            self._opener = PulsarOpener(pulsar_config(cfg))
            await self._opener.start()
            self._channels = ChannelManager(
                self._opener, self._allocator_factory(), cfg.node.id, wal_config(cfg)
            )
            pb_grpc.add_StreamingNodeServicer_to_server(
                StreamingNodeServicer(self._channels, self._opener), self._server
            )
            health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
            await self._health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
            await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
            await self._server.start()
        except BaseException:
            await self.close()
            raise
        _log.info("node %d serving on %s (tso %s)", cfg.node.id, self.address, cfg.tso.mode)

    def _bind(self, server: grpc.aio.Server) -> int:
        listen = self.config.node.listen
        tls = self.config.node.tls
        if tls.cert_file and tls.key_file:
            key = Path(tls.key_file).read_bytes()
            cert = Path(tls.cert_file).read_bytes()
            ca = Path(tls.ca_file).read_bytes() if tls.ca_file else None
            creds = grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
            )
            return int(server.add_secure_port(listen, creds))
        return int(server.add_insecure_port(listen))

    async def close(self, grace: float | None = None) -> None:
        """Graceful stop; see the module docstring for the order. Idempotent."""
        if self._closed:
            return
        self._closed = True
        grace = self.config.node.shutdown_grace_s if grace is None else grace
        await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace)
        if self._channels is not None:
            await self._channels.close()
        if self._opener is not None:
            await self._opener.close()
        if self._remote is not None:
            await self._remote.close()
        if self._tso is not None:
            await self._tso.close()
        _log.info("node %d stopped", self.config.node.id)

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
