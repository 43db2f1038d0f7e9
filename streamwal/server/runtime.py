"""One streaming node: TSO access, the Pulsar opener, its channels and its gRPC server.
The module stays whole past 500 lines: its start and close are one ordered sequence each.

Start order: the gRPC port (a taken port fails the start: SO_REUSEPORT is off, so
two nodes never share an address), TSO (in-process oracle campaigns, or a remote
allocator), the backend opener, the gRPC server, then with ``cluster.enabled`` the
node's cluster membership (:mod:`streamwal.cluster`), registered as not ready.
Without a cluster, channels' terms are kept in etcd under ``tso.key_prefix``
(:mod:`streamwal.node.terms`), shared by every node with that prefix; a cluster hands
them out with its assignments.

Readiness: the node is ready once it reached the broker (the opener's self-checks,
which a first write needs anyway, pass). Until then gRPC health is NOT_SERVING,
``/readyz`` says why, and its cluster record says it cannot take channels, so the
balancer gives it none: a node with a wrong broker URL serves nothing rather than
holding channels it cannot open. It keeps trying, with a growing pause.

Stop order (bounded at each step): a cluster node first
drains itself and stops following (its channels move while it still serves them); health
NOT_SERVING and stop accepting; let in-flight RPCs finish within the grace period; close
every WAL (each waits for its in-flight appends); a cluster node then gives up its lease,
so the channels a drain could not move go to other nodes once they are closed here
(:mod:`streamwal.cluster.member` says why); close the opener; close the TSO.

Who may call (``auth:``, docs/auth.md): every call but a health check passes the
:class:`~streamwal.node.auth.Authorizer`; a node other hosts reach serves only with TLS
and auth unless ``auth.insecure``; its TSO calls to peers carry its peer token.

In-process TSO on several nodes: each node campaigns; start-up waits until either
this node serves or another one is known to lead. A node that does not lead takes
its timestamps from the leader's TSO service (it asks its own service, whose
not-leader answer names the leader, then ``tso.remote_addresses``), and takes over
serving when it wins a later election. The oracle is served on ``node.listen``
with the node's TLS settings; ``tso.tls`` says how this node dials it and its peers.
The leader publishes :attr:`Node.address` (``node.advertise_address``, else the
listen host with the bound port) in etcd: that is what the other candidates dial.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.trace import TracerProvider

from streamwal.adaptors.pulsar import PulsarOpener
from streamwal.backoff import Backoff
from streamwal.cluster.member import ClusterMember
from streamwal.cluster.records import NodeRecord
from streamwal.cluster.routing import add_routing_servicer
from streamwal.cluster.store import ClusterStore
from streamwal.errors import (
    ClosedError,
    NotLeaderError,
    PortInUseError,
    StreamwalError,
    UnavailableError,
)
from streamwal.lifecycle import Startable
from streamwal.node.auth import Authorizer, IdentityBook, exposure_warning
from streamwal.node.channels import ChannelManager
from streamwal.node.config import ClientTLSFiles, NodeConfig, tso_config
from streamwal.node.endpoints import Readiness, check_port_free
from streamwal.node.health import HealthService
from streamwal.node.limits import grpc_message_limit
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.server_tracing import TSO_SERVICE, ServerInterceptor
from streamwal.node.servicer import NodeServicer
from streamwal.node.telemetry import NODE_ID_ATTRIBUTE
from streamwal.node.terms import EtcdTerms
from streamwal.node.tracing import routed_to, samples_every_root
from streamwal.retry import Retry, retry_call
from streamwal.server.front import NativeFront, front_binary
from streamwal.tso import (
    ClientTLS,
    Clock,
    LocalAllocator,
    RemoteSource,
    TimestampOracle,
    add_tso_servicer,
)
from streamwal.tso.tls import server_credentials
from streamwal.version import __version__
from streamwal.wal.deletion import ChannelRecords

__all__ = ["Node", "client_tls"]

_log = logging.getLogger(__name__)

SERVICE_NAME = "streamwal.v1.StreamingNode"
ROUTING_SERVICE = "streamwal.cluster.v1.ClusterRouting"
#: pauses between tries to reach the broker while not ready: from 1 s, doubled up to 15 s
_BROKER_BACKOFF = Backoff(initial=1.0, maximum=15.0)
#: publishing readiness in the cluster record, tried again each second
_PUBLISH_BACKOFF = Backoff(initial=1.0, maximum=1.0)
#: how often a ready node asks its broker at most (node.broker_lost_after_s / 3 if less)
_BROKER_CHECK_S = 5.0
#: how often the node's watch updates its health and liveness heartbeat
_WATCH_S = 0.5


def client_tls(files: ClientTLSFiles) -> ClientTLS | None:
    """``None`` (plain text) unless a file is configured."""
    if not files.enabled:
        return None
    return ClientTLS(
        ca_file=files.ca_file,
        cert_file=files.cert_file,
        key_file=files.key_file,
        server_name=files.server_name,
    )


class _CandidateSource:
    """Timestamps from this node's oracle while it leads, else from the leader's service."""

    def __init__(self, oracle: TimestampOracle, remote: RemoteSource) -> None:
        self._oracle = oracle
        self._remote = remote

    async def fetch(self, count: int) -> int:
        if self._oracle.is_serving:
            try:
                return await self._oracle.generate(count)
            except (NotLeaderError, UnavailableError):
                pass  # leadership ended just now: ask whoever leads
        return await self._remote.fetch(count)

    async def close(self) -> None:
        """Nothing to release: the node owns the oracle and the remote source."""


class Node(Startable):
    """``async with Node(config) as node``; ``node.port`` is the bound gRPC port."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        tracer_provider: TracerProvider | None = None,
        readiness: Readiness | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``tracer_provider``: this node's own, in a process that hosts several nodes
        (:meth:`~streamwal.node.telemetry.Telemetry.node_tracer_provider`), so its spans
        name it; ``None``: the process's global provider (``streamwal serve``).
        ``readiness``: what ``/readyz`` reads (``streamwal serve`` binds it first).
        ``clock``: the in-process oracle's wall and monotonic clock (``None``: the
        system's), so a fault test can move one node's clock."""
        self.config = config
        self.readiness = readiness or Readiness()
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []
        self._ready_event = asyncio.Event()
        self._tracer_provider = tracer_provider
        self._oracle: TimestampOracle | None = None
        self._candidate: _CandidateSource | None = None
        self._remote: RemoteSource | None = None
        self._opener: PulsarOpener | None = None
        self._channels: ChannelManager | None = None
        self._terms: EtcdTerms | None = None
        self._cluster: ClusterMember | None = None
        self._records: list[ChannelRecords] = []  # who keeps keys of a channel (its delete)
        self._server: grpc.aio.Server | None = None
        self._front: NativeFront | None = None
        self._health = HealthService()
        self._port = 0
        self._closed = False

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        """Where other nodes and clients reach this node, as it advertises itself."""
        if self.config.node.advertise_address:
            return self.config.node.advertise_address
        host = self.config.node.listen.rpartition(":")[0]
        return f"{host}:{self._port}"

    @property
    def channels(self) -> ChannelManager:
        if self._channels is None:
            raise ClosedError("node not started")
        return self._channels

    @property
    def oracle(self) -> TimestampOracle | None:
        """The in-process oracle (``None`` in remote mode)."""
        return self._oracle

    def _allocator_factory(self) -> Callable[[], LocalAllocator]:
        source = self._candidate if self._candidate is not None else self._remote
        if source is None:
            raise ClosedError("node not started")
        batch = self.config.tso.batch_size
        return lambda: LocalAllocator(source, batch)

    async def start(self) -> None:
        # the tasks started here (the server's, the cluster member's) make their spans
        # with this node's provider when it has one
        with routed_to(self._tracer_provider):
            await self._start()

    async def _start(self) -> None:
        cfg = self.config
        # before anything binds: see docs/auth.md, "Safe by default"
        insecure = exposure_warning(cfg.node.listen, cfg.node.tls, cfg.auth)
        if insecure is not None:
            _log.warning("node %d serves %s", cfg.node.id, insecure)
            self.readiness.note("auth", insecure)
        book = IdentityBook(cfg.auth.identities) if cfg.auth.enabled else None
        interceptor = ServerInterceptor(
            tracer_provider=self._tracer_provider,
            span_attributes={NODE_ID_ATTRIBUTE: cfg.node.id},
            route=self._tracer_provider is not None,
            guard=Authorizer(book).wrap,  # with auth off: the admin calls' audit only
        )
        self._server = grpc.aio.server(
            # one span per call (health checks none) and typed refusals of malformed
            # requests, in one wrapper per method
            interceptors=[interceptor],
            options=[
                # derived from the largest message the WAL takes: one setting
                ("grpc.max_receive_message_length", grpc_message_limit(cfg.wal.max_message_bytes)),
                ("grpc.max_send_message_length", grpc_message_limit(cfg.wal.max_message_bytes)),
                # a client that vanished without closing its connection (host gone,
                # link cut) is found out by an unanswered ping, and its streams end
                ("grpc.keepalive_time_ms", 30_000),
                ("grpc.keepalive_timeout_ms", 10_000),
                # a second node on a taken port must fail, not share it
                ("grpc.so_reuseport", 0),
            ],
        )
        self._port = await self._bind(self._server)
        self.readiness.block("broker", f"not reached yet ({cfg.pulsar.service_url})")
        if cfg.cluster.enabled:
            self.readiness.block("cluster", "not registered yet")
        try:
            if cfg.tso.mode == "in-process":
                await self._start_oracle(self._server)
            else:
                self._remote = RemoteSource(
                    cfg.tso.remote_addresses,
                    tls=client_tls(cfg.tso.tls),
                    token=cfg.auth.peer_token(),
                )
            self._opener = PulsarOpener(cfg.pulsar)
            await self._opener.start()
            if not cfg.cluster.enabled:  # a cluster hands terms out with its assignments
                self._terms = EtcdTerms(cfg.etcd, cfg.tso.key_prefix)
                await self._terms.start()
                self._records.append(self._terms)
            self._channels = ChannelManager(
                self._opener, self._allocator_factory(), cfg.node.id, cfg.wal, terms=self._terms
            )
            pb_grpc.add_StreamingNodeServicer_to_server(
                NodeServicer(self._channels, self._opener, records=self._records), self._server
            )
            health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
            if cfg.cluster.enabled:
                cluster = self._cluster = self._cluster_member()
                self._records.append(cluster.channel_records())
                add_routing_servicer(self._server, lambda: cluster.latest_view)
            else:
                add_routing_servicer(self._server, None)
            for service in self._services():  # SERVING once ready (_reach_broker)
                await self._health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
            await self._server.start()
            if self._cluster is not None:
                await self._cluster.start()
                self.readiness.clear("cluster")
        except BaseException:
            await self.close()
            raise
        self.readiness.clear("start")
        self._tasks = [
            asyncio.create_task(self._reach_broker(), name="node-reach-broker"),
            asyncio.create_task(self._watch(), name="node-watch"),
        ]
        # "serving" is said only once the node is ready (_reach_broker): a node that
        # never reaches its broker listens but serves nothing
        _log.info(
            "node %d listening on %s, advertised as %s (tso %s); not ready until the "
            "broker answers",
            cfg.node.id,
            self._listening(),
            self.address,
            cfg.tso.mode,
        )

    def _listening(self) -> str:
        return f"{self.config.node.listen.rpartition(':')[0]}:{self._port}"

    def _cluster_member(self) -> ClusterMember:
        return ClusterMember(
            self.config.cluster,
            ClusterStore.from_settings(self.config.etcd),
            node_id=self.config.node.id,
            address=self.address,
            version=__version__,
            channels=self.channels,
            not_ready="broker: not reached yet",
            on_node_lost=self._node_lost,
        )

    async def _node_lost(self, record: NodeRecord) -> None:
        """A peer was found dead: if it led the in-process TSO, end its term now, so the
        new owners of its channels get their first time tick without waiting out the
        TSO's lease."""
        if self._oracle is not None:
            await self._oracle.depose_dead_leader(record.address)

    def _services(self) -> list[str]:
        """The health names of what this node serves ("" is the whole node)."""
        return ["", SERVICE_NAME, ROUTING_SERVICE]

    @property
    def ready(self) -> bool:
        """Able to serve now: became ready, and has not lost its broker since."""
        return self._ready_event.is_set() and self.readiness.ready

    async def wait_ready(self) -> None:
        await self._ready_event.wait()

    async def _reach_broker(self) -> None:
        """Run the broker self-checks until they pass, then turn ready (see the module
        docstring); each new reason to wait is logged once. Then keep asking the
        broker (:meth:`_keep_broker`)."""
        assert self._opener is not None
        retry = Retry(_BROKER_BACKOFF, retry_if=(StreamwalError, OSError))
        said = ""
        while not self._closed:
            try:
                await self._opener.verify_broker()
                break
            except (StreamwalError, OSError) as exc:
                why = f"{type(exc).__name__}: {exc}"
                await self._not_ready(why)
                # each try probes a fresh topic: the same failure names another one
                same = re.sub(r"-probe-[0-9a-f]+", "-probe", why)
                if same != said:
                    _log.warning(
                        "node %d not ready: broker: %s (trying again, every %.0fs at most)",
                        self.config.node.id,
                        why,
                        _BROKER_BACKOFF.maximum,
                    )
                    said = same
                await retry.pause(exc)
        if self._closed:
            return
        await self._turn_ready()
        _log.info(
            "node %d ready: broker %s reached; serving on %s",
            self.config.node.id,
            self.config.pulsar.service_url,
            self._listening(),
        )
        await self._keep_broker()

    async def _keep_broker(self) -> None:
        """Readiness that follows the broker: a node that has not reached it for
        ``node.broker_lost_after_s`` turns not ready, so the balancer moves its
        channels to nodes that can write them, and ready again once it answers.
        One failed check is not enough: a broker restart or a moving bundle
        answers a few seconds later, and channels should not bounce for that."""
        assert self._opener is not None
        bound = self.config.node.broker_lost_after_s
        every = min(_BROKER_CHECK_S, bound / 3)
        lost_since: float | None = None
        ready = True
        why = ""
        while not self._closed:
            await asyncio.sleep(every)
            try:
                await self._opener.check_reachable()
            except (StreamwalError, OSError) as exc:
                now = time.monotonic()
                lost_since = now if lost_since is None else lost_since
                if ready and now - lost_since >= bound:
                    why = f"lost for {now - lost_since:.0f}s: {type(exc).__name__}: {exc}"
                    ready = False
                    _log.warning("node %d not ready: broker: %s", self.config.node.id, why)
                if not ready:  # again each round: a publish that failed is tried again
                    await self._not_ready(why)
                continue
            lost_since = None
            if not ready and not self._closed:
                ready = True
                await self._turn_ready()
                _log.info(
                    "node %d ready again: broker %s reached",
                    self.config.node.id,
                    self.config.pulsar.service_url,
                )

    async def _not_ready(self, why: str) -> None:
        """``/readyz``, gRPC health and the cluster record say the node cannot serve."""
        self.readiness.block("broker", why)
        if self._ready_event.is_set():
            for service in self._services():
                await self._health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        if self._cluster is not None:
            with contextlib.suppress(StreamwalError):
                await self._cluster.set_ready(False, f"broker: {why}")

    async def _turn_ready(self) -> None:
        self.readiness.clear("broker")
        if self._cluster is not None:
            # until it is published (or the node closes: the task is cancelled)
            retry = Retry(_PUBLISH_BACKOFF, max_attempts=None, retry_if=StreamwalError)
            await retry_call(self._publish_ready, retry)
            self.readiness.clear("cluster")
        for service in self._services():
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self._ready_event.set()

    async def _publish_ready(self) -> None:
        """The cluster record says ready; a failure keeps the node not ready, saying why."""
        assert self._cluster is not None
        try:
            await self._cluster.set_ready(True)
        except StreamwalError as exc:
            self.readiness.block("cluster", f"readiness not published: {exc}")
            raise

    async def _watch(self) -> None:
        """The liveness heartbeat, and the TSO service's health following leadership."""
        serving_tso: bool | None = None
        while not self._closed:
            self.readiness.beat()
            if self._oracle is not None and self._oracle.is_serving != serving_tso:
                serving_tso = self._oracle.is_serving
                status = (
                    health_pb2.HealthCheckResponse.SERVING
                    if serving_tso
                    else health_pb2.HealthCheckResponse.NOT_SERVING
                )
                await self._health.set(TSO_SERVICE, status)
            await asyncio.sleep(_WATCH_S)

    async def _start_oracle(self, server: grpc.aio.Server) -> None:
        """Campaign; wait until this node serves or another node is known to lead."""
        oracle = self._oracle = TimestampOracle(
            tso_config(self.config.etcd, self.config.tso), address=self.address, clock=self._clock
        )
        add_tso_servicer(server, oracle, span_attributes={NODE_ID_ATTRIBUTE: self.config.node.id})
        await oracle.start()
        try:
            await oracle.wait_serving(fail_if_follower=True)
        except NotLeaderError as exc:
            _log.info("TSO: %s leads; this node stands by as a candidate", exc.leader)
        addresses = [self.address, *self.config.tso.remote_addresses]
        self._remote = RemoteSource(
            addresses, tls=client_tls(self.config.tso.tls), token=self.config.auth.peer_token()
        )
        self._candidate = _CandidateSource(oracle, self._remote)

    async def _bind(self, server: grpc.aio.Server) -> int:
        listen = self.config.node.listen
        # checked first: gRPC's own refusal is a core log line and a vague RuntimeError
        check_port_free("gRPC", listen)
        if self.config.node.front == "native":
            sampling = self.config.tracing
            front = self._front = NativeFront(
                front_binary(self.config.node.front_binary),
                listen,
                grpc_message_limit(self.config.wal.max_message_bytes),
                # a node told to trace every call gets every call (no coalescing)
                coalesce=not (
                    self.config.telemetry.tracing
                    and samples_every_root(sampling.sampler, sampling.ratio)
                ),
            )
            server.add_insecure_port(front.upstream)
            return await front.start(self._front_exited)
        tls = self.config.node.tls
        try:
            if tls.cert_file and tls.key_file:
                creds = server_credentials(tls.cert_file, tls.key_file, tls.ca_file)
                return int(server.add_secure_port(listen, creds))
            return int(server.add_insecure_port(listen))
        except RuntimeError as exc:  # taken between the check and the bind
            raise PortInUseError("gRPC", listen, str(exc)) from None

    def _front_exited(self, code: int) -> None:
        self.readiness.block(
            "front", f"the native front exited (code {code}): no client can reach this node"
        )

    async def close(self, grace: float | None = None) -> None:
        """Graceful stop; see the module docstring for the order. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        grace = self.config.node.shutdown_grace_s if grace is None else grace
        if self._cluster is not None:
            # still serving: the channels move while clients can reach them here
            await self._cluster.leave(grace)
        try:
            await self._health.enter_graceful_shutdown()
            if self._server is not None:
                await self._server.stop(grace)
            if self._front is not None:  # after the server: calls through it end first
                await self._front.close()
            if self._channels is not None:
                await self._channels.close()
        finally:
            if self._cluster is not None:
                # only now: the channels a drain could not move are closed
                await self._cluster.close()
        if self._terms is not None:
            await self._terms.close()
        if self._opener is not None:
            await self._opener.close()
        if self._remote is not None:
            await self._remote.close()
        if self._oracle is not None:
            await self._oracle.close()
        _log.info("node %d stopped", self.config.node.id)
