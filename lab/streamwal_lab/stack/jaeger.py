"""Jaeger v2 all-in-one with in-memory storage: where the stack's traces end up.

Installed from Jaeger's official release archive where it can be downloaded (checked
against its published checksum; the release has the UI built in), else built from
source with Go (there is no Python distribution of it), which has no UI: it serves
a placeholder page at ``/`` unless ``STREAMWAL_JAEGER_UI_ASSETS`` names built
jaeger-ui assets. Started with a config file written into its folder, so its OTLP
receivers sit on 14317/14318 and leave the standard 4317/4318 to the OpenTelemetry
Collector in front of it. Everything listens on 127.0.0.1 only. Traces live in
memory and vanish on restart.
"""

from __future__ import annotations

import asyncio
import os
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from streamwal_lab.stack.gobuild import GoToolSpec, build_go_tool, go_problems
from streamwal_lab.stack.jaeger_release import (
    JAEGER_RELEASE,
    ReleaseError,
    install_release,
    release_binary,
)
from streamwal_lab.stack.jaeger_ui import UiAssetsError, ui_assets_folder, ui_is_real
from streamwal_lab.stack.paths import ENV_JAEGER_RELEASE_URL, ENV_JAEGER_UI_ASSETS, StackPaths
from streamwal_lab.stack.ports import (
    JAEGER_HEALTH_PORT,
    JAEGER_OTLP_GRPC_PORT,
    JAEGER_OTLP_HTTP_PORT,
    JAEGER_QUERY_GRPC_PORT,
    JAEGER_QUERY_PORT,
)
from streamwal_lab.stack.service import Progress, Service

__all__ = [
    "HEALTH_PORT",
    "JAEGER_VERSION",
    "OTLP_GRPC_PORT",
    "OTLP_HTTP_PORT",
    "QUERY_GRPC_PORT",
    "QUERY_HTTP_PORT",
    "RELEASE_URL",
    "JaegerService",
]

#: v1.76.0 of the Go module is the Jaeger v2.13.0 binary (same commit)
JAEGER_VERSION = "v1.76.0"
OTLP_GRPC_PORT = JAEGER_OTLP_GRPC_PORT
OTLP_HTTP_PORT = JAEGER_OTLP_HTTP_PORT
QUERY_HTTP_PORT = JAEGER_QUERY_PORT
QUERY_GRPC_PORT = JAEGER_QUERY_GRPC_PORT
HEALTH_PORT = JAEGER_HEALTH_PORT
#: the folder of the GitHub release holding the v2 archives and their checksum file
RELEASE_URL = f"https://github.com/jaegertracing/jaeger/releases/download/{JAEGER_VERSION}"

_HOST = "127.0.0.1"
_STORE = "memstore"
_MAX_TRACES = 100_000

_SPEC = GoToolSpec(
    name="jaeger",
    version=JAEGER_VERSION,
    tool=f"github.com/jaegertracing/jaeger/cmd/jaeger@{JAEGER_VERSION}",
)


_DEFAULT_PORTS: Mapping[str, int] = {
    "otlp_grpc": OTLP_GRPC_PORT,
    "otlp_http": OTLP_HTTP_PORT,
    "query_http": QUERY_HTTP_PORT,
    "query_grpc": QUERY_GRPC_PORT,
    "health": HEALTH_PORT,
}


def jaeger_config(
    ports: Mapping[str, int] = _DEFAULT_PORTS, ui_assets: Path | None = None
) -> dict[str, Any]:
    """The collector-style configuration of Jaeger v2 for the local stack.

    Jaeger's own metrics are off (the collector already takes the usual 8888) and the
    query service does not trace itself (its spans would loop through the collector).
    ``ui_assets`` (a folder with ``index.html``) replaces whatever UI the binary has.
    """

    def at(name: str) -> dict[str, str]:
        return {"endpoint": f"{_HOST}:{ports[name]}"}

    query: dict[str, Any] = {
        "storage": {"traces": _STORE},
        "enable_tracing": False,
        "http": at("query_http"),
        "grpc": at("query_grpc"),
    }
    if ui_assets is not None:
        query["ui"] = {"assets_path": str(ui_assets)}

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
            "healthcheckv2": {"use_v2": True, "http": at("health")},
            "jaeger_query": query,
            "jaeger_storage": {"backends": {_STORE: {"memory": {"max_traces": _MAX_TRACES}}}},
        },
        "receivers": {"otlp": {"protocols": {"grpc": at("otlp_grpc"), "http": at("otlp_http")}}},
        "processors": {"batch": {}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": _STORE}},
    }


class JaegerService(Service):
    """Jaeger v2 on loopback; ``probe`` succeeds once the query API lists services.

    ``ports`` (default: the stack's) lets a test run a private Jaeger beside the shared
    one. ``ui_assets`` and ``release_url`` default to ``$STREAMWAL_JAEGER_UI_ASSETS``
    and ``$STREAMWAL_JAEGER_RELEASE_URL`` (else :data:`RELEASE_URL`; ``off``: never
    download).
    """

    name = "jaeger"
    start_timeout = 60.0

    def __init__(
        self,
        paths: StackPaths,
        *,
        ports: Mapping[str, int] | None = None,
        ui_assets: str | None = None,
        release_url: str | None = None,
    ) -> None:
        super().__init__(paths)
        self._ports = dict(ports or _DEFAULT_PORTS)
        self._ui_assets = (
            ui_assets if ui_assets is not None else os.environ.get(ENV_JAEGER_UI_ASSETS)
        )
        chosen = release_url or os.environ.get(ENV_JAEGER_RELEASE_URL) or RELEASE_URL
        self.release_url = None if chosen.strip().lower() == "off" else chosen

    @property
    def ports(self) -> dict[str, int]:
        return dict(self._ports)

    @property
    def url(self) -> str:
        """Base URL of the UI and of the HTTP query API (``/api/traces``...)."""
        return f"http://{_HOST}:{self._ports['query_http']}"

    @property
    def otlp_grpc_endpoint(self) -> str:
        """``host:port`` of Jaeger's own OTLP gRPC receiver (the collector exports here)."""
        return f"{_HOST}:{self._ports['otlp_grpc']}"

    @property
    def go_binary(self) -> Path:
        return self.paths.artifact(f"jaeger-{JAEGER_VERSION}", "bin", "jaeger")

    @property
    def binary(self) -> Path:
        """The release's binary when it was installed (it has the UI), else the Go build."""
        released = release_binary(self.paths)
        return released if released.is_file() else self.go_binary

    @property
    def config_file(self) -> Path:
        return self.workdir / "jaeger.yaml"

    def ui_source(self) -> str:
        """Where the UI a start would serve comes from, in words for ``status``."""
        if self._ui_assets:
            return f"assets {self._ui_assets}"
        if release_binary(self.paths).is_file():
            return f"release {JAEGER_RELEASE} (UI built in)"
        return f"Go build {JAEGER_VERSION} (no UI assets: placeholder page)"

    def prerequisites(self) -> list[str]:
        problems = []
        if self._ui_assets:
            try:
                ui_assets_folder(self._ui_assets, self.paths)
            except UiAssetsError as exc:
                problems.append(f"{exc}; fix or unset {ENV_JAEGER_UI_ASSETS}")
        if self.binary.is_file() or self.release_url is not None:
            return problems  # a release download needs no Go; if it fails, install says so
        return problems + go_problems(f"building Jaeger {JAEGER_VERSION}")

    def install(self, progress: Progress) -> None:
        if release_binary(self.paths).is_file():
            return
        if self.release_url is not None:
            try:
                install_release(self.release_url, self.paths, progress)
                return
            except ReleaseError as exc:
                progress(f"jaeger: the release cannot be used ({exc}); {self._fallback_ui()}")
        build_go_tool(_SPEC, self.paths, progress)

    def _fallback_ui(self) -> str:
        """What the Go build will serve, in words: the given assets when there are any."""
        if self._ui_assets:
            return (
                f"using the Go build with the UI assets {ENV_JAEGER_UI_ASSETS} names "
                f"({self._ui_assets})"
            )
        return (
            f"using the Go build, which has no UI (set {ENV_JAEGER_UI_ASSETS} to built "
            "jaeger-ui assets)"
        )

    def prepare(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        assets = ui_assets_folder(self._ui_assets, self.paths) if self._ui_assets else None
        config = jaeger_config(self._ports, assets)
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))

    def command(self) -> list[str]:
        return [str(self.binary), "--config", str(self.config_file)]

    async def probe(self) -> bool:
        try:
            return await asyncio.to_thread(_http_ok, f"{self.url}/api/services")
        except Exception:
            return False

    def restart_reason(self) -> str | None:
        """A Jaeger started without the UI assets now named serves the placeholder page
        (the Jaeger UI test would fail on it until someone restarts it by hand)."""
        if self._ui_assets and ui_is_real(self.url) is False:
            return f"serves no UI though {ENV_JAEGER_UI_ASSETS} names its assets"
        return None

    def extra_status(self) -> dict[str, str]:
        return {"ui": self.url, "otlp_grpc": self.otlp_grpc_endpoint, "ui_source": self.ui_source()}

    def live_status(self) -> dict[str, object]:
        """``ui_real``: whether the running Jaeger serves a UI at ``/`` (``None``: no answer)."""
        return {"ui_real": ui_is_real(self.url)}


def _http_ok(url: str, timeout: float = 5.0) -> bool:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        status: int = response.status
        return status == 200
