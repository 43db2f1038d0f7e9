"""The cluster profile: a real multi-broker Pulsar on loopback, from the same Maven jars.

ZooKeeper holds the metadata, three bookies store the ledgers (each entry on two of
them: ensemble, write and ack quorum 2), and two brokers serve topics, moving bundles
between them as a production cluster does. ``public/default`` has 16 bundles, and the
policies the WAL checks are set on it through the admin API, as an operator would:
deduplication on, retention infinite. An admin entry in front of both brokers hands
each connection to the next broker in turn, so admin calls meet the redirects a load
balancer in front of a real cluster causes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal_lab.stack.paths import StackPaths
from streamwal_lab.stack.process import port_in_use
from streamwal_lab.stack.pulsar import BOOKIE_DISK, JVM_OPENS, LOG4J2, PulsarService
from streamwal_lab.stack.service import Progress, Service

__all__ = [
    "CLUSTER_NAME",
    "BookieService",
    "BrokerService",
    "ClusterInfo",
    "EntryService",
    "ZooKeeperService",
    "cluster_services",
]

CLUSTER_NAME = "streamwal-cluster"
ZOOKEEPER_PORT = 12181
BOOKIE_PORTS = (13181, 13182, 13183)
#: (binary, admin) ports of each broker
BROKER_PORTS = ((16651, 18081), (16652, 18082))
ENTRY_PORT = 18090
BUNDLES = 16
QUORUM = 2
NAMESPACE = "public/default"


@dataclass(frozen=True)
class ClusterInfo:
    """Addresses of the running cluster profile."""

    #: every broker, as a client lists them (it looks each topic's owner up)
    pulsar_url: str
    #: the admin entry that reaches any broker (a redirect leads to a topic's owner)
    admin_url: str
    #: each broker's own admin address, in broker order
    broker_admin_urls: tuple[str, ...]
    #: each broker's name as the cluster knows it (``host:admin port``), in broker order
    broker_ids: tuple[str, ...]


def cluster_info() -> ClusterInfo:
    return ClusterInfo(
        pulsar_url="pulsar://" + ",".join(f"127.0.0.1:{b}" for b, _ in BROKER_PORTS),
        admin_url=f"http://127.0.0.1:{ENTRY_PORT}",
        broker_admin_urls=tuple(f"http://127.0.0.1:{w}" for _, w in BROKER_PORTS),
        broker_ids=tuple(f"127.0.0.1:{w}" for _, w in BROKER_PORTS),
    )


class _PulsarJvm(Service):
    """A JVM on the Pulsar jars the standalone broker uses (installed once, shared)."""

    main_class: str
    heap = "-Xmx256m"
    direct_memory = "-XX:MaxDirectMemorySize=256m"

    def __init__(self, paths: StackPaths) -> None:
        super().__init__(paths)
        self._jars = PulsarService(paths)

    def prerequisites(self) -> list[str]:
        return self._jars.prerequisites()

    def install(self, progress: Progress) -> None:
        self._jars.install(progress)

    def args(self) -> list[str]:
        """What follows the main class on the command line."""
        return []

    def prepare(self) -> None:
        # INFO to a size-rolled file beside the service's output, as for the standalone
        (self.workdir / "log4j2.xml").write_text(LOG4J2.replace("broker.log", "info.log"))

    def _write_conf(self, name: str, conf: dict[str, object]) -> Path:
        """A ``key=value`` properties file in the service's folder."""
        path = self.workdir / name
        path.write_text("".join(f"{key}={value}\n" for key, value in conf.items()))
        return path

    def command(self) -> list[str]:
        return [
            "java", *JVM_OPENS, "-Xms64m", self.heap, self.direct_memory,
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.xml'}",
            "-cp", f"{self._jars.lib_dir}/*", self.main_class, *self.args(),
        ]  # fmt: skip


class ZooKeeperService(_PulsarJvm):
    """The metadata store; once it answers, the cluster's metadata is initialised."""

    name = "zookeeper"
    main_class = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
    heap = "-Xmx128m"
    direct_memory = "-XX:MaxDirectMemorySize=64m"
    start_timeout = 60.0

    @property
    def ports(self) -> dict[str, int]:
        return {"client": ZOOKEEPER_PORT}

    def prepare(self) -> None:
        super().prepare()
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        (self.workdir / "zoo.cfg").write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={self.workdir / 'data'}",
                    f"clientPort={ZOOKEEPER_PORT}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok",
                    # snapshots and transaction logs of a test cluster stay small
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    "",
                ]
            )
        )

    def args(self) -> list[str]:
        return [str(self.workdir / "zoo.cfg")]

    async def probe(self) -> bool:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", ZOOKEEPER_PORT), 2
            )
            writer.write(b"ruok")
            answer = await asyncio.wait_for(reader.read(4), 2)
            writer.close()
        except (OSError, TimeoutError):
            return False
        return answer == b"imok"

    @property
    def _initialised(self) -> Path:
        # beside ZooKeeper's data: `stack clean` removes both together
        return self.workdir / "data" / "cluster-initialised"

    async def after_start(self, progress: Progress) -> None:
        if self._initialised.exists():
            return
        progress(f"{self.name}: initialising the metadata of cluster {CLUSTER_NAME!r}")
        info = cluster_info()
        zk = f"zk:127.0.0.1:{ZOOKEEPER_PORT}"
        argv = [
            "java", *JVM_OPENS, "-Xmx128m",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.xml'}",
            "-cp", f"{self._jars.lib_dir}/*", "org.apache.pulsar.PulsarClusterMetadataSetup",
            "--cluster", CLUSTER_NAME, "--metadata-store", zk,
            "--configuration-metadata-store", zk,
            # one URL listing every broker, as the broker service URL does
            "--web-service-url", "http://" + ",".join(info.broker_ids),
            "--broker-service-url", info.pulsar_url,
            "--default-namespace-bundle-number", str(BUNDLES),
        ]  # fmt: skip
        done = await asyncio.to_thread(
            subprocess.run, argv, cwd=self.workdir, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise RuntimeError(
                f"the cluster metadata setup failed (exit {done.returncode}):\n{tail}"
            )
        self._initialised.write_text(CLUSTER_NAME + "\n")


class BookieService(_PulsarJvm):
    """One bookie: journal and ledgers in its own folder, registered in ZooKeeper."""

    main_class = "org.apache.bookkeeper.server.Main"
    start_group = "bookies"
    heap = "-Xmx128m"
    direct_memory = "-XX:MaxDirectMemorySize=128m"
    start_timeout = 90.0

    def __init__(self, paths: StackPaths, index: int) -> None:
        super().__init__(paths)
        self.index = index
        self.name = f"bookie-{index}"
        self.port = BOOKIE_PORTS[index - 1]

    @property
    def ports(self) -> dict[str, int]:
        return {"bookie": self.port}

    def prepare(self) -> None:
        super().prepare()
        conf = {
            "bookiePort": self.port,
            "advertisedAddress": "127.0.0.1",
            "listeningInterface": "lo",
            "allowLoopback": "true",
            "useHostNameAsBookieID": "false",
            "metadataServiceUri": f"zk+hierarchical://127.0.0.1:{ZOOKEEPER_PORT}/ledgers",
            "journalDirectories": self.workdir / "journal",
            "ledgerDirectories": self.workdir / "ledgers",
            "httpServerEnabled": "false",
            # a bookie killed with SIGKILL leaves the registry after 5 s (not 10 s)
            "zkTimeout": 5000,
            # a development machine's caches (BookKeeper's defaults take a share of RAM)
            "dbStorage_writeCacheMaxSizeMb": 16,
            "dbStorage_readAheadCacheMaxSizeMb": 16,
            "dbStorage_rocksDB_blockCacheSize": 8 * 1024 * 1024,
            **BOOKIE_DISK,
        }
        self._write_conf("bookie.conf", conf)

    def args(self) -> list[str]:
        return ["--conf", str(self.workdir / "bookie.conf")]

    async def probe(self) -> bool:
        return await asyncio.to_thread(port_in_use, self.port)


class BrokerService(_PulsarJvm):
    """One broker of the cluster; ``probe`` asks its own health check, which writes and
    reads a topic through the bookies."""

    main_class = "org.apache.pulsar.PulsarBrokerStarter"
    start_group = "brokers"
    heap = "-Xmx320m"
    direct_memory = "-XX:MaxDirectMemorySize=256m"
    start_timeout = 120.0

    def __init__(self, paths: StackPaths, index: int) -> None:
        super().__init__(paths)
        self.index = index
        self.name = f"broker-{index}"
        self.broker_port, self.web_port = BROKER_PORTS[index - 1]

    @property
    def ports(self) -> dict[str, int]:
        return {"broker": self.broker_port, "web": self.web_port}

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def prepare(self) -> None:
        super().prepare()
        conf = {
            "clusterName": CLUSTER_NAME,
            "metadataStoreUrl": f"zk:127.0.0.1:{ZOOKEEPER_PORT}",
            "configurationMetadataStoreUrl": f"zk:127.0.0.1:{ZOOKEEPER_PORT}",
            "brokerServicePort": self.broker_port,
            "webServicePort": self.web_port,
            "bindAddress": "127.0.0.1",
            "advertisedAddress": "127.0.0.1",
            "managedLedgerDefaultEnsembleSize": QUORUM,
            "managedLedgerDefaultWriteQuorum": QUORUM,
            "managedLedgerDefaultAckQuorum": QUORUM,
            "defaultNumberOfNamespaceBundles": BUNDLES,
            "functionsWorkerEnabled": "false",
            "allowAutoTopicCreationType": "non-partitioned",
            # the broker's entry cache, sized for a development machine
            "managedLedgerCacheSizeMB": 32,
            # a broker killed with SIGKILL lets go of its bundles (ZooKeeper session)
            # after 5 s rather than 30 s
            "metadataStoreSessionTimeoutMillis": 5000,
            # bundles move when a test or chaos round moves them, not when the load
            # manager sheds load between two of its steps
            "loadBalancerSheddingEnabled": "false",
        }
        self._write_conf("broker.conf", conf)

    def args(self) -> list[str]:
        return ["--broker-conf", str(self.workdir / "broker.conf")]

    async def probe(self) -> bool:
        try:
            answer = await PulsarAdmin(self.admin_url, timeout=15).get("brokers/health")
        except Exception:
            return False
        return bool(answer == "ok")

    def extra_status(self) -> dict[str, str]:
        return {"url": f"pulsar://127.0.0.1:{self.broker_port}", "admin": self.admin_url}


class EntryService(Service):
    """The admin entry in front of both brokers (:mod:`streamwal_lab.stack.entry`);
    once it answers, the namespace's policies are set through it."""

    name = "admin-entry"
    start_timeout = 30.0

    @property
    def ports(self) -> dict[str, int]:
        return {"http": ENTRY_PORT}

    def prerequisites(self) -> list[str]:
        return []

    def install(self, progress: Progress) -> None:
        pass

    def command(self) -> list[str]:
        ports = [str(web) for _, web in BROKER_PORTS]
        return [sys.executable, "-m", "streamwal_lab.stack.entry", str(ENTRY_PORT), *ports]

    async def probe(self) -> bool:
        try:
            brokers = await PulsarAdmin(cluster_info().admin_url, timeout=5).get(
                f"brokers/{CLUSTER_NAME}"
            )
        except Exception:
            return False
        return isinstance(brokers, list) and len(brokers) == len(BROKER_PORTS)

    async def after_start(self, progress: Progress) -> None:
        admin = PulsarAdmin(cluster_info().admin_url)
        base = f"namespaces/{NAMESPACE}"
        await admin.post(f"{base}/deduplication", True)
        await admin.post(
            f"{base}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
        )
        bundles = await admin.get(f"{base}/bundles")
        if not isinstance(bundles, dict) or "numBundles" not in bundles:
            raise RuntimeError(f"{NAMESPACE} has no bundles: the brokers answered {bundles!r}")
        progress(
            f"{self.name}: {NAMESPACE} has {bundles['numBundles']} bundles, "
            "deduplication on, retention infinite"
        )

    def extra_status(self) -> dict[str, str]:
        return {"admin": cluster_info().admin_url}


def cluster_services(paths: StackPaths) -> list[Service]:
    """In start order: each needs the ones before it."""
    return [
        ZooKeeperService(paths),
        *(BookieService(paths, i) for i in range(1, len(BOOKIE_PORTS) + 1)),
        *(BrokerService(paths, i) for i in range(1, len(BROKER_PORTS) + 1)),
        EntryService(paths),
    ]
