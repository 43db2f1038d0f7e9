"""Jaeger v2 all-in-one with in-memory storage: where the stack's traces end up.

Built from source with Go (there is no Python distribution of it) and started with a
config file written into its folder, so its OTLP receivers sit on 14317/14318 and
leave the standard 4317/4318 to the OpenTelemetry Collector in front of it.
Everything listens on 127.0.0.1 only. Traces live in memory and vanish on restart.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from node.stack.gobuild import GoToolSpec, build_go_tool, go_problems
from node.stack.service import Progress, Service

__all__ = [
    "HEALTH_PORT",
    "JAEGER_VERSION",
    "OTLP_GRPC_PORT",
    "OTLP_HTTP_PORT",
    "QUERY_GRPC_PORT",
    "QUERY_HTTP_PORT",
    "JaegerService",
]

#: v1.76.0 of the Go module is the Jaeger v2.13.0 binary (same commit)
JAEGER_VERSION = "v1.76.0"
OTLP_GRPC_PORT = 14317
OTLP_HTTP_PORT = 14318
QUERY_HTTP_PORT = 16686
QUERY_GRPC_PORT = 16685
HEALTH_PORT = 13134

_HOST = "127.0.0.1"
_STORE = "memstore"
_MAX_TRACES = 100_000

_SPEC = GoToolSpec(
    name="jaeger",
    version=JAEGER_VERSION,
    tool=f"github.com/jaegertracing/jaeger/cmd/jaeger@{JAEGER_VERSION}",
)


def jaeger_config() -> dict[str, Any]:
    """The collector-style configuration of Jaeger v2 for the local stack.

    Jaeger's own metrics are off (the collector already takes the usual 8888) and the
    query service does not trace itself (its spans would loop through the collector).
    """

    def at(port: int) -> dict[str, str]:
        return {"endpoint": f"{_HOST}:{port}"}

    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {
                "resource": {"service.name": "jaeger"},
                "metrics": {"level": "none"},
                "logs": {"level": "info"},
            },
        },
        "extensions": {
            "healthcheckv2": {"use_v2": True, "http": at(HEALTH_PORT)},
            "jaeger_query": {
                "storage": {"traces": _STORE},
                "enable_tracing": False,
                "http": at(QUERY_HTTP_PORT),
                "grpc": at(QUERY_GRPC_PORT),
            },
            "jaeger_storage": {"backends": {_STORE: {"memory": {"max_traces": _MAX_TRACES}}}},
        },
        "receivers": {
            "otlp": {"protocols": {"grpc": at(OTLP_GRPC_PORT), "http": at(OTLP_HTTP_PORT)}}
        },
        "processors": {"batch": {}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": _STORE}},
    }


class JaegerService(Service):
    """Jaeger v2 on loopback; ``probe`` succeeds once the query API lists services."""

    name = "jaeger"
    start_timeout = 60.0

    @property
    def ports(self) -> dict[str, int]:
        return {
            "otlp_grpc": OTLP_GRPC_PORT,
            "otlp_http": OTLP_HTTP_PORT,
            "query_http": QUERY_HTTP_PORT,
            "query_grpc": QUERY_GRPC_PORT,
            "health": HEALTH_PORT,
        }

    @property
    def url(self) -> str:
        """Base URL of the UI and of the HTTP query API (``/api/traces``...)."""
        return f"http://{_HOST}:{QUERY_HTTP_PORT}"

    @property
    def otlp_grpc_endpoint(self) -> str:
        """``host:port`` of Jaeger's own OTLP gRPC receiver (the collector exports here)."""
        return f"{_HOST}:{OTLP_GRPC_PORT}"

    @property
    def binary(self) -> Path:
        return self.paths.artifact(f"jaeger-{JAEGER_VERSION}", "bin", "jaeger")

    @property
    def config_file(self) -> Path:
        return self.workdir / "jaeger.yaml"

    def prerequisites(self) -> list[str]:
        if self.binary.is_file():
            return []
        return go_problems(f"building Jaeger {JAEGER_VERSION}")

    def install(self, progress: Progress) -> None:
        build_go_tool(_SPEC, self.paths, progress)

    def prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(yaml.safe_dump(jaeger_config(), sort_keys=False))

    def command(self) -> list[str]:
        return [str(self.binary), "--config", str(self.config_file)]

    async def probe(self) -> bool:
        try:
            return await asyncio.to_thread(_http_ok, f"{self.url}/api/services")
        except Exception:
            return False

    def extra_status(self) -> dict[str, str]:
        return {"ui": self.url, "otlp_grpc": self.otlp_grpc_endpoint}


def _http_ok(url: str, timeout: float = 5.0) -> bool:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        status: int = response.status
        return status == 200
