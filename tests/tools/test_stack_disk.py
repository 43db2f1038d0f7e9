"""The stack keeps its disk: a bookie sized for a laptop, ``status`` shows disk use, ``clean``.

Every stack here is a throwaway one: its own cache folder under ``tmp_path``
(``STREAMWAL_CACHE_DIR``), checked to lie there before any command runs, so the shared
stack is never stopped or wiped.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import pytest

from streamwal_lab.stack import ServiceState, StackPaths
from streamwal_lab.stack.process import is_alive, rotate_log, start_detached
from streamwal_lab.stack.pulsar import BOOKIE_DISK, PulsarService
from streamwal_lab.stack.stack import disk_usage, human_bytes

MIB = 1 << 20


def _conf(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs}


@pytest.mark.parametrize("stock", [False, True])
def test_standalone_conf_sizes_the_bookie_for_a_development_machine(
    tmp_path: Path, stock: bool
) -> None:
    paths = StackPaths(cache=tmp_path / "cache", stack=tmp_path / "stack")
    service = PulsarService(paths, stock=stock)
    service.prepare()
    conf = _conf(service.workdir / "standalone.conf")

    for key, value in BOOKIE_DISK.items():
        assert conf.get(key) == str(value), f"{key}: {conf.get(key)!r}"
    # BookKeeper's production defaults (2 GB journals, five kept, 1 GB entry logs,
    # compaction hourly and daily) must not come back by an edit
    assert int(conf["journalMaxSizeMB"]) <= 128
    assert int(conf["journalMaxBackups"]) <= 2
    assert int(conf["journalPreAllocSizeMB"]) <= int(conf["journalMaxSizeMB"])
    assert int(conf["logSizeLimit"]) <= 64 * MIB
    assert int(conf["skipListSizeLimit"]) < int(conf["logSizeLimit"])
    assert int(conf["gcWaitTime"]) <= 60_000
    assert int(conf["minorCompactionInterval"]) <= 600
    assert int(conf["majorCompactionInterval"]) <= 3600


def test_disk_usage_counts_allocated_blocks_not_lengths(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "full").write_bytes(os.urandom(3 * MIB))
    with (tmp_path / "a" / "sparse").open("wb") as sparse:  # a preallocated journal
        sparse.truncate(512 * MIB)
    used = disk_usage(tmp_path)
    assert 3 * MIB <= used < 4 * MIB, used
    assert disk_usage(tmp_path / "missing") == 0


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (5 * MIB, "5.0 MiB"), (3 << 30, "3.0 GiB")],
)
def test_human_bytes(size: int, text: str) -> None:
    assert human_bytes(size) == text


# ---- a throwaway stack -----------------------------------------------------------------


class Throwaway:
    """A cache folder with installs and one stack with data and a running "service"."""

    def __init__(self, root: Path, spawned: list[int]) -> None:
        self.root = root
        self.name = f"disk-{uuid.uuid4().hex[:8]}"
        self.env = {**os.environ, "STREAMWAL_CACHE_DIR": str(root), "STREAMWAL_STACK": self.name}
        self.paths = StackPaths(cache=root, stack=root / "stacks" / self.name)
        shared = StackPaths.default()
        assert self.paths.stack.resolve().is_relative_to(root.resolve())
        assert self.paths.stack.resolve() != shared.stack.resolve()
        self.installs = [
            root / "artifacts" / "pulsar-4.0.7" / "lib" / "pulsar-broker-4.0.7.jar",
            root / "artifacts" / "jaeger-1.76.0" / "bin" / "jaeger",
            root / "go" / "pkg" / "mod" / "cache.txt",
            root / "maven-repo" / "org" / "x.pom",
        ]
        for path in self.installs:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"installed")
        self.data = {
            "pulsar": self.paths.service_dir("pulsar") / "data" / "bookkeeper" / "current",
            "etcd": self.paths.service_dir("etcd") / "data" / "member",
        }
        for service, folder in self.data.items():
            folder.mkdir(parents=True)
            (folder / "blob").write_bytes(os.urandom((2 if service == "pulsar" else 1) * MIB))
        marker = uuid.uuid4().hex
        self.pid = start_detached(
            [sys.executable, "-c", "import time; time.sleep(120)"],
            cwd=root,
            log=root / "sleeper.log",
            env={},
            marker=marker,
        )
        spawned.append(self.pid)
        state = {"etcd": asdict(ServiceState("etcd", self.pid, {}, "", time.time(), marker))}
        (self.paths.stack / "state.json").write_text(json.dumps(state))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``stack ARGS`` without a terminal: stdin is /dev/null."""
        return subprocess.run(
            [sys.executable, "-m", "streamwal.cli", "stack", *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def intact(self) -> bool:
        return all((folder / "blob").exists() for folder in self.data.values())

    def installs_intact(self) -> bool:
        return all(path.read_bytes() == b"installed" for path in self.installs)


@pytest.fixture
def throwaway(tmp_path: Path, spawned: list[int]) -> Throwaway:
    return Throwaway(tmp_path / "cache", spawned)


def test_status_shows_the_disk_each_service_uses(throwaway: Throwaway) -> None:
    done = throwaway.cli("status", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["service"]: row for row in json.loads(done.stdout)}
    assert 2 * MIB <= rows["pulsar"]["disk"] < 3 * MIB, rows["pulsar"]
    assert 1 * MIB <= rows["etcd"]["disk"] < 2 * MIB, rows["etcd"]
    assert rows["jaeger"]["disk"] == 0

    done = throwaway.cli("status")
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert "disk=2.0 MiB" in lines["pulsar"], lines["pulsar"]
    assert "disk=1.0 MiB" in lines["etcd"], lines["etcd"]
    assert "disk=0 B" in lines["jaeger"], lines["jaeger"]
    assert f"stack folder {throwaway.paths.stack}: 3.0 MiB" in done.stderr, done.stderr


def test_clean_without_a_terminal_or_yes_refuses_and_touches_nothing(
    throwaway: Throwaway,
) -> None:
    started = time.monotonic()
    done = throwaway.cli("clean")
    assert time.monotonic() - started < 30, "clean waited for an answer on stdin"
    assert done.returncode == 2, done
    assert "pass --yes" in done.stderr, done.stderr
    assert str(throwaway.paths.stack) in done.stderr
    assert throwaway.intact()
    assert is_alive(throwaway.pid)


def test_clean_yes_stops_the_stack_wipes_its_data_and_keeps_installs(
    throwaway: Throwaway,
) -> None:
    done = throwaway.cli("clean", "--yes")
    assert done.returncode == 0, done.stderr
    assert "stopped: etcd" in done.stdout, done.stdout
    assert not is_alive(throwaway.pid)
    assert sorted(p.name for p in throwaway.paths.stack.iterdir()) == [".lock"]
    assert throwaway.installs_intact()

    done = throwaway.cli("status", "--json")
    assert all(row["disk"] == 0 and not row["running"] for row in json.loads(done.stdout))


def _on_a_terminal(throwaway: Throwaway, answer: bytes) -> tuple[int, str]:
    """``stack clean`` with a pseudo-terminal as stdin and stdout, answering ``answer``."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamwal.cli", "stack", "clean"],
            env=throwaway.env,
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
        )
        os.close(terminal)
        seen = b""
        deadline = time.monotonic() + 30
        while b"[y/N]" not in seen:
            assert time.monotonic() < deadline, f"no question asked: {seen!r}"
            with contextlib.suppress(OSError):
                seen += os.read(controller, 4096)
        os.write(controller, answer + b"\n")
        code = proc.wait(timeout=30)
        with contextlib.suppress(OSError):
            while chunk := os.read(controller, 4096):
                seen += chunk
        return code, seen.decode(errors="replace")
    finally:
        os.close(controller)


def test_clean_on_a_terminal_asks_first(throwaway: Throwaway) -> None:
    code, text = _on_a_terminal(throwaway, b"n")
    assert code == 1, text
    assert f"delete its data in {throwaway.paths.stack} (3.0 MiB)?" in text, text
    assert throwaway.intact()
    assert is_alive(throwaway.pid)

    code, text = _on_a_terminal(throwaway, b"y")
    assert code == 0, text
    assert not throwaway.intact()
    assert not is_alive(throwaway.pid)
    assert throwaway.installs_intact()


@pytest.mark.parametrize("name", ["..", "../.."])
def test_clean_refuses_a_stack_folder_that_holds_the_installs(
    throwaway: Throwaway, name: str
) -> None:
    throwaway.env["STREAMWAL_STACK"] = name
    done = throwaway.cli("clean", "--yes")
    assert done.returncode == 1, done
    assert "holds the cache of installs" in done.stderr, done.stderr
    assert throwaway.installs_intact()
    assert throwaway.intact()
    assert is_alive(throwaway.pid)


def test_a_service_output_file_past_its_limit_is_rotated_at_start(tmp_path: Path) -> None:
    log = tmp_path / "svc.log"
    rotate_log(log, limit=10)  # no file yet: nothing to do
    log.write_bytes(b"x" * 10)
    rotate_log(log, limit=10)
    assert log.exists() and not (tmp_path / "svc.log.1").exists()
    log.write_bytes(b"y" * 11)
    (tmp_path / "svc.log.1").write_bytes(b"old")
    rotate_log(log, limit=10)
    assert not log.exists()
    assert (tmp_path / "svc.log.1").read_bytes() == b"y" * 11


def test_the_broker_logs_info_to_a_rolled_file_and_only_warnings_to_its_output(
    tmp_path: Path,
) -> None:
    paths = StackPaths(cache=tmp_path / "cache", stack=tmp_path / "stack")
    service = PulsarService(paths)
    service.prepare()
    config = service.workdir / "log4j2.xml"
    assert f"-Dlog4j2.configurationFile={config}" in service.command()
    text = config.read_text()
    assert '<ThresholdFilter level="WARN"/>' in text
    assert '<SizeBasedTriggeringPolicy size="16 MB"/>' in text
