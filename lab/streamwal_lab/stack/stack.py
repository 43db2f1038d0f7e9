"""The stack orchestrator: install, start, probe, record, stop.

State lives in ``<stack>/state.json``: for each service its pid, ports, log and a
random marker placed in the process environment, so a later ``up`` recognises a
running stack (and reuses it) and ``down`` stops only processes this stack started.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import itertools
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from streamwal_lab.stack.cluster import ClusterInfo, cluster_info, cluster_services
from streamwal_lab.stack.etcd import EtcdService
from streamwal_lab.stack.paths import StackPaths
from streamwal_lab.stack.process import (
    is_alive,
    pid_matches,
    port_in_use,
    rotate_log,
    start_detached,
    stop_process,
)
from streamwal_lab.stack.pulsar import PulsarService
from streamwal_lab.stack.service import Progress, Service, ServiceState

__all__ = [
    "PROFILES",
    "Stack",
    "StackError",
    "StackInfo",
    "disk_usage",
    "human_bytes",
    "print_progress",
]


class StackError(RuntimeError):
    """A service could not be installed or started; the message says what to fix."""


def print_progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class StackInfo:
    """Addresses of the running stack, as tests and the demo use them."""

    pulsar_url: str
    pulsar_admin_url: str
    etcd_endpoint: str
    otlp_endpoint: str | None = None
    jaeger_url: str | None = None


def _optional_services() -> list[type[Service]]:
    """Telemetry services, when their modules are present."""
    found: list[type[Service]] = []
    try:
        from streamwal_lab.stack.collector import CollectorService
        from streamwal_lab.stack.jaeger import JaegerService
    except ImportError:
        return found
    found.extend([JaegerService, CollectorService])
    return found


#: what ``--profile`` chooses: one standalone broker beside etcd and telemetry, or a
#: multi-broker Pulsar (:mod:`streamwal_lab.stack.cluster`) in a stack folder of its own
PROFILES = ("standalone", "cluster")


class Stack:
    """The set of local services; every method is safe to call on a stack that is up."""

    def __init__(
        self,
        paths: StackPaths | None = None,
        progress: Progress = print_progress,
        *,
        profile: str = "standalone",
    ):
        if profile not in PROFILES:
            raise StackError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
        self.profile = profile
        self.paths = paths or StackPaths.default(profile=profile)
        self.progress = progress
        services: list[Service]
        if profile == "cluster":
            services = cluster_services(self.paths)
        else:
            # start order: Jaeger before the collector that exports to it
            services = [
                EtcdService(self.paths),
                *(cls(self.paths) for cls in _optional_services()),
                PulsarService(self.paths),
            ]
        self.services = {s.name: s for s in services}

    # ---- state -------------------------------------------------------------------
    @property
    def _state_file(self) -> Path:
        return self.paths.stack / "state.json"

    def _load_state(self) -> dict[str, ServiceState]:
        try:
            raw = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return {}
        return {name: ServiceState(**entry) for name, entry in raw.items()}

    def _save_state(self, state: dict[str, ServiceState]) -> None:
        self.paths.stack.mkdir(parents=True, exist_ok=True)
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: asdict(v) for k, v in state.items()}, indent=2))
        tmp.replace(self._state_file)

    def running(self, name: str) -> ServiceState | None:
        entry = self._load_state().get(name)
        if entry is not None and pid_matches(entry.pid, entry.marker):
            return entry
        return None

    def info(self) -> StackInfo:
        if self.profile != "standalone":
            raise StackError("the cluster profile's addresses are in ClusterInfo")
        pulsar = self.services["pulsar"]
        etcd = self.services["etcd"]
        assert isinstance(pulsar, PulsarService) and isinstance(etcd, EtcdService)
        collector = self.services.get("otel-collector")
        jaeger = self.services.get("jaeger")
        return StackInfo(
            pulsar_url=pulsar.url,
            pulsar_admin_url=pulsar.admin_url,
            etcd_endpoint=etcd.endpoint,
            otlp_endpoint=(collector.extra_status().get("otlp") if collector else None),
            jaeger_url=(jaeger.extra_status().get("ui") if jaeger else None),
        )

    def _select(self, names: Iterable[str] | None) -> list[Service]:
        if names is None:
            return list(self.services.values())
        chosen = []
        for name in names:
            if name not in self.services:
                raise StackError(
                    f"unknown service {name!r}; known: {', '.join(sorted(self.services))}"
                )
            chosen.append(self.services[name])
        return chosen

    @contextlib.asynccontextmanager
    async def _exclusive(self, what: str) -> AsyncIterator[None]:
        """Hold the stack's lock: one ``up`` or ``down`` at a time across processes.

        Without it, two ``up`` calls started together (two terminals, a test run beside
        the demo) both find a service stopped, both start it, and the loser's dead
        process overwrites the winner's entry in the state file.
        """
        self.paths.stack.mkdir(parents=True, exist_ok=True)
        with (self.paths.stack / ".lock").open("a+") as lock:  # local, instant
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.progress(f"waiting for another `stack {what}` on this stack to finish")
                await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # ---- up ----------------------------------------------------------------------
    async def up(self, names: Iterable[str] | None = None) -> StackInfo:
        """Install what is missing and start what is not running; reuse what is.

        Waits for an ``up`` or ``down`` of the same stack in another process."""
        if self.profile != "standalone":
            raise StackError(f"this stack runs the {self.profile} profile: use up_cluster()")
        async with self._exclusive("up"):
            await self._up(names)
            return self.info()

    async def up_cluster(self, names: Iterable[str] | None = None) -> ClusterInfo:
        """:meth:`up` for the cluster profile."""
        if self.profile != "cluster":
            raise StackError(f"this stack runs the {self.profile} profile, not the cluster")
        async with self._exclusive("up"):
            await self._up(names)
            return cluster_info()

    async def _up(self, names: Iterable[str] | None) -> None:
        services = self._select(names)
        todo: list[Service] = []
        for service in services:
            entry = self.running(service.name)
            if entry is not None:  # ours: kept unless it does not answer or is outdated
                if not await service.probe():
                    reason: str | None = "not answering"
                else:
                    reason = await asyncio.to_thread(service.restart_reason)
                if reason is None:
                    self.progress(f"{service.name}: already running (pid {entry.pid})")
                    continue
                self.progress(f"{service.name}: running but {reason}; restarting")
                await asyncio.to_thread(stop_process, entry.pid, entry.marker)
            todo.append(service)
        problems = [p for s in todo for p in s.prerequisites()]
        if problems:
            raise StackError("missing prerequisites:\n  - " + "\n  - ".join(problems))
        for service in todo:
            for label, port in service.ports.items():
                if port_in_use(port):
                    raise StackError(
                        f"{service.name}: port {port} ({label}) on 127.0.0.1 is already taken "
                        "by another process; stop it or run `streamwal stack status`"
                    )
        await asyncio.gather(*(asyncio.to_thread(s.install, self.progress) for s in todo))
        # in dependency order; services of one start group (the cluster's bookies, its
        # brokers) need only those before them, and start side by side
        for group in _start_groups(todo):
            results = await asyncio.gather(
                *(self._start(service) for service in group), return_exceptions=True
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:  # its members that did start are not left running unwatched
                await self._down([service.name for service in group])
                raise failed[0]

    async def _start(self, service: Service) -> None:
        attempts = max(1, service.start_attempts)
        for attempt in range(1, attempts + 1):
            output = await self._launch(service)
            problem = await service.start_problem(output)
            if problem is None:
                try:
                    await service.after_start(self.progress)
                except Exception as exc:
                    await self._down([service.name])
                    raise StackError(f"{service.name}: {exc}") from exc
                return
            await self._down([service.name])  # stops it and drops its state entry
            if attempt == attempts:
                raise StackError(f"{service.name}: {problem}; it was there after {attempts} starts")
            self.progress(
                f"{service.name}: {problem}; stopping it and starting it again "
                f"(start {attempt + 1} of {attempts})"
            )

    async def _launch(self, service: Service) -> Callable[[], str]:
        """Start the server and wait until it answers; returns a reader of what it has
        written to its output file since this start."""
        service.workdir.mkdir(parents=True, exist_ok=True)
        service.prepare()
        marker = uuid.uuid4().hex
        log = service.workdir / f"{service.name}.log"
        rotate_log(log)  # here rather than in start_detached, so the offset stays true
        offset = log.stat().st_size if log.exists() else 0
        started = time.monotonic()
        pid = start_detached(
            service.command(),
            cwd=service.workdir,
            log=log,
            env=service.environment(),
            marker=marker,
        )
        state = self._load_state()
        state[service.name] = ServiceState(
            name=service.name,
            pid=pid,
            ports=service.ports,
            log=str(log),
            started_at=time.time(),
            marker=marker,
            extra=service.extra_status(),
        )
        self._save_state(state)
        self.progress(f"{service.name}: started (pid {pid}), waiting until it answers")
        next_report = 10.0
        while True:
            if not is_alive(pid):
                raise StackError(
                    f"{service.name} exited during start-up; last lines of {log}:\n" + _tail(log)
                )
            if await service.probe():
                break
            elapsed = time.monotonic() - started
            if elapsed > service.start_timeout:
                await asyncio.to_thread(stop_process, pid, marker)
                raise StackError(
                    f"{service.name} did not answer within {service.start_timeout:.0f}s; "
                    f"last lines of {log}:\n" + _tail(log)
                )
            if elapsed >= next_report:
                self.progress(f"{service.name}: still starting ({elapsed:.0f}s)")
                next_report += 10.0
            await asyncio.sleep(0.5)
        self.progress(f"{service.name}: ready in {time.monotonic() - started:.1f}s")
        return functools.partial(_read_from, log, offset)

    # ---- clean -------------------------------------------------------------------------
    async def clean(self) -> list[str]:
        """Stop every service and delete the stack's data; returns the names stopped.

        Only the stack folder is emptied (each service's data, logs and config, and the
        state file): the installed jars and Go builds live in the shared cache, so the
        next ``up`` starts at once, on empty data.
        """
        stack, cache = self.paths.stack.resolve(), self.paths.cache.resolve()
        if cache.is_relative_to(stack):  # STREAMWAL_STACK=.. or a hand-made StackPaths
            raise StackError(
                f"the stack folder {stack} holds the cache of installs {cache}; "
                "not deleting it (check STREAMWAL_STACK)"
            )
        async with self._exclusive("clean"):
            stopped = await self._down(None)
            for entry in self.paths.stack.iterdir():
                if entry.name == ".lock":  # held right now; an empty file
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    await asyncio.to_thread(shutil.rmtree, entry)
                else:
                    entry.unlink()
            return stopped

    # ---- down / restart ------------------------------------------------------------
    async def down(self, names: Iterable[str] | None = None) -> list[str]:
        """Stop the selected services this stack started; returns the names stopped."""
        async with self._exclusive("down"):
            return await self._down(names)

    async def _down(self, names: Iterable[str] | None) -> list[str]:
        """In reverse start order; the members of a start group side by side, as
        they started."""
        stopped: list[str] = []
        for group in _start_groups(reversed(self._select(names))):
            entries = self._load_state()
            running = [(s.name, entries[s.name]) for s in group if s.name in entries]
            results = await asyncio.gather(
                *(asyncio.to_thread(stop_process, e.pid, e.marker) for _, e in running),
                return_exceptions=True,
            )
            stopped += [
                name for (name, _), done in zip(running, results, strict=True) if done is True
            ]
            # read again after the wait: services of a start group write their entries
            # meanwhile
            state = self._load_state()
            for (name, _), done in zip(running, results, strict=True):
                if not isinstance(done, BaseException):
                    state.pop(name, None)
            self._save_state(state)
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:  # the others are stopped and forgotten; this one is still known
                raise failed[0]
        return stopped

    async def restart(self, name: str) -> None:
        """Stop and start one service (fault tests use this for broker restarts)."""
        async with self._exclusive("restart"):
            await self._down([name])
            await self._up([name])

    def status(self) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        state = self._load_state()
        for name, service in self.services.items():
            entry = state.get(name)
            alive = entry is not None and pid_matches(entry.pid, entry.marker)
            rows.append(
                {
                    "service": name,
                    "running": alive,
                    "pid": entry.pid if entry and alive else None,
                    "ports": service.ports,
                    **({"log": entry.log} if entry else {}),
                    **service.extra_status(),
                    "disk": disk_usage(service.workdir),
                    # what the running process was started with, and what it answers
                    **(entry.extra if entry and alive else {}),
                    **(service.live_status() if alive else {}),
                }
            )
        return rows


def disk_usage(folder: Path) -> int:
    """Bytes the files under ``folder`` occupy, as ``du`` counts them (0 if it is missing).

    Allocated blocks, not file lengths: the bookie's journal grows in preallocated steps
    and etcd preallocates its WAL, so lengths would overstate what the disk holds.
    """
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile (a rolled journal)
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def human_bytes(size: int) -> str:
    """``1.5 GiB``: binary units, one decimal above a KiB."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    value, index = float(size), 0
    while value >= 1024 and index < len(units) - 1:
        value /= 1024
        index += 1
    return f"{size} B" if index == 0 else f"{value:.1f} {units[index]}"


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


def _start_groups(services: Iterable[Service]) -> list[list[Service]]:
    """Consecutive services of one start group together; any other service alone."""
    return [
        list(grouped)
        for _, grouped in itertools.groupby(services, key=lambda s: s.start_group or id(s))
    ]
