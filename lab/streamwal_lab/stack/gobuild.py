"""Build Go binaries from source once, into the shared cache, keyed by name and version.

Servers that ship no wheel (Jaeger, an OpenTelemetry Collector) are compiled with
the local ``go`` toolchain through the Go module proxy. A build happens in a private
temporary folder and is renamed into place only when it succeeded
(:mod:`streamwal_lab.stack.artifacts`); different artifacts may build concurrently (Go's own
caches are safe for that).

``GOPATH``, ``GOMODCACHE`` and ``GOCACHE`` point under ``<cache>/go`` so downloads and
compiled packages are reused by the next build and nothing is written into the
source tree or the user's own Go folders.

Everything here blocks (it runs ``go``); the stack calls ``install`` in a thread.
Like the rest of the stack package it does not import ``wal``, so a broken library
module never stops the stack from coming up; a bad spec raises ``ValueError``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamwal_lab.stack.artifacts import cached_folder
from streamwal_lab.stack.paths import StackPaths
from streamwal_lab.stack.service import Progress

__all__ = [
    "GoBuild",
    "GoBuildError",
    "GoToolSpec",
    "build_go_tool",
    "cached_binary",
    "go_environment",
    "go_executable",
    "go_problems",
]

#: a heartbeat line is sent to ``progress`` this often while one step runs
_HEARTBEAT_SECONDS = 30.0
_LOG_TAIL_LINES = 30


class GoBuildError(RuntimeError):
    """A Go build could not run or failed; the message names the step and shows its output."""


def go_executable() -> str:
    """The ``go`` command on ``PATH``; raises :class:`GoBuildError` when there is none."""
    found = shutil.which("go")
    if found is None:
        raise GoBuildError(
            "the Go toolchain ('go') is not on PATH; it is needed to build Jaeger and the "
            "OpenTelemetry Collector from source: install Go (https://go.dev/dl/) and retry"
        )
    return found


def go_problems(what: str) -> list[str]:
    """Prerequisite problems for building ``what`` with Go (empty when ``go`` is there)."""
    if shutil.which("go") is None:
        return [f"'go' (the Go toolchain, https://go.dev/dl/) is not on PATH; {what} needs it"]
    return []


def go_environment(paths: StackPaths) -> dict[str, str]:
    """The process environment for ``go``: caches under ``<cache>/go``, no cgo, no workspace.

    ``-modcacherw`` keeps the module cache deletable with ordinary tools; ``GOWORK=off``
    stops a ``go.work`` in some parent folder from changing what gets built.
    """
    root = paths.cache / "go"
    env = {k: v for k, v in os.environ.items() if k not in {"GOBIN", "GOFLAGS", "GOROOT"}}
    env.update(
        GOPATH=str(root),
        GOMODCACHE=str(root / "mod"),
        GOCACHE=str(root / "build"),
        GOFLAGS="-modcacherw",
        GOWORK="off",
        CGO_ENABLED="0",
    )
    return env


class GoBuild:
    """One build in progress: its private folder, the Go environment, and its log.

    ``run`` executes one step, appends its output to ``build.log`` and raises
    :class:`GoBuildError` (with the log's tail) when the step fails.
    """

    def __init__(
        self, label: str, workdir: Path, env: dict[str, str], go: str, progress: Progress
    ) -> None:
        self.label = label
        self.workdir = workdir
        self.env = env
        self.go = go
        self.progress = progress
        self.log = workdir / "build.log"

    def run(self, phase: str, argv: list[str], *, cwd: Path | None = None) -> None:
        self.progress(f"{self.label}: {phase}")
        step = " ".join([Path(argv[0]).name, *argv[1:2]])
        started = time.monotonic()
        with open(self.log, "ab") as out:
            out.write(f"$ {' '.join(argv)}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                argv,
                cwd=cwd or self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                while True:
                    try:
                        code = proc.wait(timeout=_HEARTBEAT_SECONDS)
                        break
                    except subprocess.TimeoutExpired:
                        elapsed = time.monotonic() - started
                        self.progress(f"{self.label}: {step} still running ({elapsed:.0f}s)")
            finally:
                if proc.poll() is None:  # interrupted: do not leave the compiler behind
                    proc.kill()
                    proc.wait()
        if code != 0:
            raise GoBuildError(
                f"{self.label}: `{' '.join(argv)}` failed with exit code {code}; "
                f"last lines of its output:\n{_tail(self.log)}"
            )


def cached_binary(
    paths: StackPaths,
    name: str,
    version: str,
    progress: Progress,
    steps: Callable[[GoBuild], None],
) -> Path:
    """``<artifacts>/<name>-<version>/bin/<name>``, built by ``steps`` the first time.

    ``steps`` runs in a fresh folder (``build.workdir``) and must leave the binary at
    ``build.workdir / "bin" / name``; that folder then becomes the artifact folder in
    one rename. Returns at once when the binary is already there.
    """
    final = paths.artifact(f"{name}-{version}")
    binary = final / "bin" / name
    if binary.is_file():
        return binary
    label = f"{name} {version}"
    go = go_executable()
    started = time.monotonic()

    def fill(tmp: Path) -> None:
        (tmp / "bin").mkdir()
        steps(GoBuild(label, tmp, go_environment(paths), go, progress))
        if not (tmp / "bin" / name).is_file():
            raise GoBuildError(f"{label}: the build produced no bin/{name}")
        progress(f"{label}: built in {time.monotonic() - started:.0f}s -> {binary}")

    cached_folder(final, fill, done=f"bin/{name}")
    return binary


@dataclass(frozen=True)
class GoToolSpec:
    """A binary built from a small Go "tools" module that pins its source.

    ``tool`` is the argument of ``go get -tool`` (``package@version``), the usual way;
    ``requires`` are further ``module@version`` pins fetched with ``go get`` before it
    (to force a dependency's version). ``target`` is the package ``go build`` compiles
    (by default the package part of ``tool``). ``version`` names the cache entry.
    """

    name: str
    version: str
    tool: str = ""
    requires: tuple[str, ...] = ()
    target: str = ""
    module: str = ""
    ldflags: str = "-s -w"

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"name: not a plain binary name: {self.name!r}")
        if not self.version or "/" in self.version:
            raise ValueError(f"version: must be a non-empty tag: {self.version!r}")
        if self.tool and "@" not in self.tool:
            raise ValueError(f"tool: expected 'package@version', got {self.tool!r}")
        for pin in self.requires:
            if "@" not in pin:
                raise ValueError(f"requires: expected 'module@version', got {pin!r}")
        if not self.build_target:
            raise ValueError("target: needed when no tool is given")

    @property
    def build_target(self) -> str:
        return self.target or self.tool.partition("@")[0]

    @property
    def module_path(self) -> str:
        return self.module or f"streamwal.local/tools/{self.name}"


def build_go_tool(spec: GoToolSpec, paths: StackPaths, progress: Progress) -> Path:
    """Build ``spec`` into the cache (once) and return the binary's path.

    Raises :class:`GoBuildError` when ``go`` is missing or a step fails.
    """

    def steps(build: GoBuild) -> None:
        src = build.workdir / "src"
        src.mkdir()
        build.run("go mod init", [build.go, "mod", "init", spec.module_path], cwd=src)
        for pin in spec.requires:
            build.run(f"go get {pin}", [build.go, "get", pin], cwd=src)
        if spec.tool:
            build.run(
                f"go get -tool {spec.tool} (downloads modules the first time)",
                [build.go, "get", "-tool", spec.tool],
                cwd=src,
            )
        build.run(
            "go build (takes a few minutes the first time)",
            [
                build.go, "build", "-trimpath", f"-ldflags={spec.ldflags}",
                "-o", str(build.workdir / "bin" / spec.name), spec.build_target,
            ],
            cwd=src,
        )  # fmt: skip

    return cached_binary(paths, spec.name, spec.version, progress, steps)


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.splitlines()[-lines:])
