"""An OpenTelemetry Collector in front of Jaeger: what the project's exporters talk to.

The binary is a small distribution built with the collector builder (ocb) from
``otelcol-builder.yaml`` (OTLP receiver, batch processor, OTLP gRPC and debug
exporters, health_check extension); the builder itself is compiled from the Go
module proxy first. It runs with the repository's ``otel-collector.yaml``, which
also works with a stock ``otelcol-contrib``. ``JAEGER_OTLP_ENDPOINT`` in its
environment points the exporter at the stack's Jaeger.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import socket
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from streamwal_lab.stack import jaeger
from streamwal_lab.stack.gobuild import (
    GoBuild,
    GoBuildError,
    GoToolSpec,
    build_go_tool,
    cached_binary,
    go_problems,
)
from streamwal_lab.stack.ports import (
    COLLECTOR_HEALTH_PORT,
    COLLECTOR_METRICS_PORT,
    COLLECTOR_OTLP_GRPC_PORT,
    COLLECTOR_OTLP_HTTP_PORT,
)
from streamwal_lab.stack.service import Progress, Service

__all__ = [
    "COLLECTOR_VERSION",
    "HEALTH_PORT",
    "METRICS_PORT",
    "OTLP_GRPC_PORT",
    "OTLP_HTTP_PORT",
    "CollectorService",
    "collector_config_path",
]

#: the collector release every module of the manifest is pinned to
COLLECTOR_VERSION = "v0.165.0"
OTLP_GRPC_PORT = COLLECTOR_OTLP_GRPC_PORT
OTLP_HTTP_PORT = COLLECTOR_OTLP_HTTP_PORT
HEALTH_PORT = COLLECTOR_HEALTH_PORT
METRICS_PORT = COLLECTOR_METRICS_PORT

_HOST = "127.0.0.1"
_MANIFEST = "otelcol-builder.yaml"
_OCB = GoToolSpec(
    name="ocb",
    version=COLLECTOR_VERSION,
    tool=f"go.opentelemetry.io/collector/cmd/builder@{COLLECTOR_VERSION}",
)


def collector_config_path() -> Path:
    """The repository's ``otel-collector.yaml``: the lab runs from a checkout (installed
    editable, ``lab/streamwal_lab/stack/`` is three folders below the root)."""
    return Path(__file__).resolve().parents[3] / "otel-collector.yaml"


def _manifest() -> tuple[dict[str, Any], str]:
    """The builder manifest and a short digest of it (part of the cache key)."""
    text = resources.files("streamwal_lab.stack").joinpath(_MANIFEST).read_text()
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded, hashlib.sha256(text.encode()).hexdigest()[:10]


class CollectorService(Service):
    """The collector on loopback; ``probe`` needs its health check and OTLP port up."""

    name = "otel-collector"
    start_timeout = 60.0

    @property
    def ports(self) -> dict[str, int]:
        return {
            "otlp_grpc": OTLP_GRPC_PORT,
            "otlp_http": OTLP_HTTP_PORT,
            "health": HEALTH_PORT,
            "metrics": METRICS_PORT,
        }

    @property
    def otlp_endpoint(self) -> str:
        """Where OTLP gRPC exporters send (``OTEL_EXPORTER_OTLP_ENDPOINT`` form)."""
        return f"http://{_HOST}:{OTLP_GRPC_PORT}"

    @property
    def binary(self) -> Path:
        manifest, digest = _manifest()
        name = str(manifest["dist"]["name"])
        return self.paths.artifact(f"{name}-{COLLECTOR_VERSION}-{digest}", "bin", name)

    def prerequisites(self) -> list[str]:
        problems = []
        if not collector_config_path().is_file():
            problems.append(f"the collector configuration {collector_config_path()} is missing")
        if not self.binary.is_file():
            problems.extend(
                go_problems(f"building the OpenTelemetry Collector {COLLECTOR_VERSION}")
            )
        return problems

    def install(self, progress: Progress) -> None:
        manifest, digest = _manifest()
        name = str(manifest["dist"]["name"])
        if self.binary.is_file():
            return
        ocb = build_go_tool(_OCB, self.paths, progress)

        def steps(build: GoBuild) -> None:
            dist = build.workdir / "dist"
            manifest["dist"]["output_path"] = str(dist)
            manifest["dist"]["go"] = build.go
            manifest_file = build.workdir / _MANIFEST
            manifest_file.write_text(yaml.safe_dump(manifest, sort_keys=False))
            build.run(
                "ocb: generate, go mod tidy, go build (takes a few minutes the first time)",
                [str(ocb), f"--config={manifest_file}"],
            )
            built = dist / name
            if not built.is_file():
                raise GoBuildError(f"ocb finished but produced no {built}")
            shutil.move(built, build.workdir / "bin" / name)

        cached_binary(self.paths, name, f"{COLLECTOR_VERSION}-{digest}", progress, steps)

    def command(self) -> list[str]:
        return [str(self.binary), "--config", str(collector_config_path())]

    def environment(self) -> dict[str, str]:
        return {"JAEGER_OTLP_ENDPOINT": f"{_HOST}:{jaeger.OTLP_GRPC_PORT}"}

    async def probe(self) -> bool:
        try:
            return await asyncio.to_thread(self._answers)
        except Exception:
            return False

    def _answers(self) -> bool:
        url = f"http://{_HOST}:{HEALTH_PORT}/"
        with urllib.request.urlopen(url, timeout=5.0) as response:
            if response.status != 200:
                return False
        with socket.create_connection((_HOST, OTLP_GRPC_PORT), timeout=5.0):
            return True

    def extra_status(self) -> dict[str, str]:
        return {
            "otlp": self.otlp_endpoint,
            "otlp_http": f"http://{_HOST}:{OTLP_HTTP_PORT}",
            "health": f"http://{_HOST}:{HEALTH_PORT}/",
        }
