"""A real Pulsar standalone broker, assembled from Maven Central jars.

No tarball is needed: Maven resolves ``pulsar-broker`` and its dependencies into a
cached ``lib/`` folder, and the broker runs as ``PulsarStandaloneStarter`` with an
in-process BookKeeper on RocksDB metadata, bound to loopback, without the functions
worker or stream storage. The shared stack's broker is generous for the demo and the
tools: deduplication on, retention infinite, inactive topics kept. A private broker can
run with Pulsar's own defaults instead (``stock=True``), to show that the WAL holds its
log without any of that.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from streamwal_lab.stack.ports import PULSAR_BROKER_PORT, PULSAR_WEB_PORT
from streamwal_lab.stack.service import Progress, Service

__all__ = [
    "BOOKIE_DISK",
    "JVM_OPENS",
    "LOG4J2",
    "PULSAR_VERSION",
    "STOCK_INACTIVE_CHECK",
    "PulsarService",
]

PULSAR_VERSION = "4.0.7"
BROKER_PORT = PULSAR_BROKER_PORT
WEB_PORT = PULSAR_WEB_PORT

_POM = Path(__file__).with_name("pulsar-standalone-pom.xml")

#: the shared stack's generous settings, left out of a stock broker
_GENEROUS = [
    # a producer that reconnects resends what it had in flight; the broker drops what
    # it already persisted (by sequence id), so a connection reset never writes an
    # entry twice or out of order
    "brokerDeduplicationEnabled=true",
    # the tools' raw topics (benchmarks, probes) outlive the absence of subscriptions
    "brokerDeleteInactiveTopicsEnabled=false",
    "defaultRetentionTimeInMinutes=-1",
    "defaultRetentionSizeInMB=-1",
]

#: the in-process bookie sized for a development machine (every broker, stock or not).
#: ``PulsarStandaloneStarter`` loads standalone.conf into the bookie's configuration too,
#: and BookKeeper's defaults are a production server's: 2 GB journal files, five old ones
#: kept, 1 GB entry logs, compaction hourly (minor) and daily (major).
BOOKIE_DISK = {
    # the journal rolls over at this size; old journals go once a checkpoint passes them
    "journalMaxSizeMB": 64,
    "journalMaxBackups": 1,
    # a journal file grows in steps of this much
    "journalPreAllocSizeMB": 4,
    # entry log files (bytes): garbage collection frees whole files, so small ones free
    # the space of deleted ledgers sooner. A file only rolls over between two flushes of
    # the bookie's memtable (bytes), which therefore bounds it too; smaller flushes also
    # checkpoint sooner, which is when old journals go
    "logSizeLimit": 32 * 1024 * 1024,
    "skipListSizeLimit": 16 * 1024 * 1024,
    # ms between garbage collections of deleted ledgers' entries
    "gcWaitTime": 10_000,
    # seconds: rewrite entry logs that are mostly (minor) or partly (major) garbage
    "minorCompactionInterval": 300,
    "majorCompactionInterval": 1800,
}

#: a stock broker's periodic work, only made faster: a topic with no subscription goes
#: after 5 s without producers or readers (Pulsar: checked every 60 s), a backlog quota
#: is enforced on connected producers within 5 s (60 s), and deduplication's own cursor,
#: which holds the log until its next snapshot, moves every 5 s (120 s)
STOCK_INACTIVE_CHECK = {
    "brokerDeleteInactiveTopicsFrequencySeconds": 2,
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": 5,
    "backlogQuotaCheckIntervalInSeconds": 5,
    "brokerDeduplicationSnapshotIntervalSeconds": 5,
    "brokerDeduplicationSnapshotFrequencyInSeconds": 5,
}

#: what the broker writes when its BookKeeper client finds no bookie registered
BOOKIE_LOST_SIGNS = ("BookieIdNotResolvedException", "allBookies []")

#: one Maven resolution at a time in this process
_INSTALLING = threading.Lock()

#: seconds a broker restarted on old data is watched after it first answers
RESTART_SETTLE_SECONDS = 4.0


def bookie_lost(output: str) -> str | None:
    """The first sign in ``output`` that the broker lost sight of its bookie, if any."""
    for sign in BOOKIE_LOST_SIGNS:
        if sign in output:
            return sign
    return None


#: what every Pulsar, BookKeeper and ZooKeeper JVM of the stack needs on Java 17
JVM_OPENS = [
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/sun.net=ALL-UNNAMED",
    "--add-opens", "java.management/sun.management=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dlog4j2.formatMsgNoLookups=true",
]  # fmt: skip

_JVM_FLAGS = [
    *JVM_OPENS,
    "-Dbookkeeper.metadata.bookie.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver",
    "-Dbookkeeper.metadata.client.drivers="
    "org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver",
    "-Xms256m", "-Xmx1g", "-XX:MaxDirectMemorySize=1g",
]  # fmt: skip


#: The broker logs every topic, cursor and admin request at INFO (a test run writes
#: tens of MiB): INFO goes to a size-rolled ``broker.log`` (at most three files of 16 MiB), and
#: only warnings and errors to stdout, whose file keeps start-up failures readable.
LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <Console name="CONSOLE" target="SYSTEM_OUT">
      <ThresholdFilter level="WARN"/>
      <PatternLayout pattern="%d{ISO8601} - %-5p - [%t:%C{1}@%L] - %m%n"/>
    </Console>
    <RollingFile name="BROKER" fileName="broker.log" filePattern="broker.log.%i">
      <PatternLayout pattern="%d{ISO8601} - %-5p - [%t:%C{1}@%L] - %m%n"/>
      <SizeBasedTriggeringPolicy size="16 MB"/>
      <DefaultRolloverStrategy max="2" fileIndex="min"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO">
      <AppenderRef ref="CONSOLE"/>
      <AppenderRef ref="BROKER"/>
    </Root>
  </Loggers>
</Configuration>
"""


def _quiet_logger() -> logging.Logger:
    """The probe fails on purpose while the broker starts: keep the client silent."""
    logger = logging.getLogger("streamwal.stack.pulsar-probe")
    logger.setLevel(logging.CRITICAL)
    logger.propagate = False
    return logger


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    match = re.search(r'version "(\d+)', out.stderr + out.stdout)
    return int(match.group(1)) if match else None


class PulsarService(Service):
    """The broker; ``probe`` succeeds only once a producer can really be created."""

    name = "pulsar"
    start_timeout = 180.0

    def __init__(  # type: ignore[no-untyped-def]
        self,
        paths,
        version: str = PULSAR_VERSION,
        *,
        broker_port: int = BROKER_PORT,
        web_port: int = WEB_PORT,
        stock: bool = False,
    ) -> None:
        """Ports default to the shared stack's; a private broker (fault tests) picks its own.

        ``stock``: Pulsar's default retention, deduplication and inactive-topic policy,
        with the inactive-topic check made faster (:data:`STOCK_INACTIVE_CHECK`).
        """
        super().__init__(paths)
        self.version = version
        self.broker_port = broker_port
        self.web_port = web_port
        self.stock = stock
        self._old_data = False

    @property
    def ports(self) -> dict[str, int]:
        return {"broker": self.broker_port, "web": self.web_port}

    #: a restart on old data can leave the broker unable to find its own bookie:
    #: tried this many starts before ``up`` gives up
    start_attempts = 3

    async def start_problem(self, output: Callable[[], str]) -> str | None:
        """On old data, watch the broker for a while after it first answers.

        The bookie's registration is an "ephemeral" node of the RocksDB metadata store,
        which outlives the process; after a restart, the old node and the new lock on
        it can keep deleting each other (the ResourceLock loop of apache/pulsar#17759).
        The broker's BookKeeper client then sees no bookie at times, and writes fail
        with "Not enough non-faulty bookies" long after ``probe`` first succeeded.
        """
        if not self._old_data:
            return None
        deadline = time.monotonic() + RESTART_SETTLE_SECONDS
        while True:
            seen = bookie_lost(output())
            if seen is not None:
                return (
                    f"the broker cannot find the bookie it runs ({seen!r} in its output), "
                    "so its writes fail; a restart on old data can do this "
                    "(`streamwal stack clean` starts it on empty data)"
                )
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)
        if not await self.probe():
            return "the broker stopped answering right after it started"
        return None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.broker_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def lib_dir(self) -> Path:
        return self.paths.artifact(f"pulsar-{self.version}", "lib")

    def _installed(self) -> bool:
        return (self.lib_dir / ".complete").exists()

    def prerequisites(self) -> list[str]:
        problems = []
        java = shutil.which("java")
        if java is None:
            problems.append(
                "Java 17 or newer is required to run the Pulsar broker: 'java' not found"
            )
        else:
            major = _java_major(java)
            if major is None or major < 17:
                problems.append(
                    f"Java 17 or newer is required to run Pulsar {self.version}, found {major}"
                )
        if not self._installed() and shutil.which("mvn") is None:
            problems.append(
                "Maven ('mvn') is required once, to fetch the Pulsar broker from Maven Central"
            )
        return problems

    def install(self, progress: Progress) -> None:
        # the cluster profile's services share these jars and install them side by side
        with _INSTALLING:
            self._install(progress)

    def _install(self, progress: Progress) -> None:
        if self._installed():
            return
        build = self.paths.artifact(f"pulsar-{self.version}")
        build.mkdir(parents=True, exist_ok=True)
        pom = build / "pom.xml"
        pom.write_text(_POM.read_text().replace("PULSAR_VERSION", self.version))
        staging = build / "lib.partial"
        shutil.rmtree(staging, ignore_errors=True)
        progress(f"pulsar {self.version}: resolving the broker's jars from Maven Central")
        argv = [
            "mvn", "-B", "-f", str(pom),
            f"-Dmaven.repo.local={self.paths.cache / 'maven-repo'}",
            "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        downloaded = 0
        started = time.monotonic()
        tail: list[str] = []
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail = [*tail[-30:], line.rstrip()]
                if "Downloaded from" in line and line.rstrip().endswith(")"):
                    downloaded += 1
                    if downloaded % 40 == 0:
                        progress(
                            f"pulsar {self.version}: {downloaded} artifacts downloaded "
                            f"({time.monotonic() - started:.0f}s)"
                        )
            code = proc.wait()
        if code != 0:
            detail = "\n".join(tail[-15:])
            raise RuntimeError(
                f"Maven could not resolve Pulsar {self.version} from Maven Central "
                f"(exit {code}):\n{detail}"
            )
        jars = list(staging.glob("*.jar"))
        if not any(j.name.startswith("pulsar-broker-") for j in jars):
            raise RuntimeError(f"Maven finished but pulsar-broker-{self.version}.jar is missing")
        shutil.rmtree(self.lib_dir, ignore_errors=True)
        staging.rename(self.lib_dir)
        (self.lib_dir / ".complete").write_text(f"{len(jars)} jars\n")
        progress(
            f"pulsar {self.version}: {len(jars)} jars ready ({time.monotonic() - started:.0f}s)"
        )

    def prepare(self) -> None:
        data = self.workdir / "data"
        self._old_data = (data / "metadata").exists()
        data.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "standalone.conf"
        conf.write_text(
            "\n".join(
                [
                    "clusterName=standalone",
                    f"brokerServicePort={self.broker_port}",
                    f"webServicePort={self.web_port}",
                    "bindAddress=127.0.0.1",
                    "advertisedAddress=127.0.0.1",
                    # the in-process bookie reads this file too: keep it on loopback
                    "listeningInterface=lo",
                    "allowLoopback=true",
                    "useHostNameAsBookieID=false",
                    "managedLedgerDefaultEnsembleSize=1",
                    "managedLedgerDefaultWriteQuorum=1",
                    "managedLedgerDefaultAckQuorum=1",
                    "functionsWorkerEnabled=false",
                    "allowAutoTopicCreation=true",
                    "allowAutoTopicCreationType=non-partitioned",
                    *(f"{key}={value}" for key, value in BOOKIE_DISK.items()),
                    *(
                        [f"{key}={value}" for key, value in STOCK_INACTIVE_CHECK.items()]
                        if self.stock
                        else _GENEROUS
                    ),
                    "",
                ]
            )
        )

        (self.workdir / "log4j2.xml").write_text(LOG4J2)

    def command(self) -> list[str]:
        data = self.workdir / "data"
        return [
            "java",
            *_JVM_FLAGS,
            # each pause, for telling a collector at its limit from a hung bookie
            f"-Xlog:gc:file={self.workdir / 'gc.log'}:time,uptime:filecount=2,filesize=4m",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.xml'}",
            "-cp",
            f"{self.lib_dir}/*",
            "org.apache.pulsar.PulsarStandaloneStarter",
            "-c", str(self.workdir / "standalone.conf"),
            "-nfw", "-nss",
            "--metadata-dir", str(data / "metadata"),
            "--bookkeeper-dir", str(data / "bookkeeper"),
        ]  # fmt: skip

    async def probe(self) -> bool:
        try:
            return await asyncio.wait_for(self._create_producer(), timeout=15)
        except Exception:
            return False

    async def _create_producer(self) -> bool:
        from pulsar import asyncio as pulsar_asyncio

        client = pulsar_asyncio.Client(
            self.url, operation_timeout_seconds=10, logger=_quiet_logger()
        )
        try:
            producer = await client.create_producer(
                "persistent://public/default/streamwal-stack-probe"
            )
            await producer.send(b"probe")
            await producer.close()
            return True
        finally:
            await client.close()

    def extra_status(self) -> dict[str, str]:
        return {"url": self.url, "admin": self.admin_url, "version": self.version}
