"""``otel-collector.yaml`` runs on the stack's own collector and on a stock otelcol-contrib.

The stack builds its collector with ocb from
``lab/streamwal_lab/stack/otelcol-builder.yaml``; people outside the stack run the same
file with ``otelcol-contrib``.
Every component the file names must therefore be in both distributions. Checked
statically, without a collector: the running collector is covered by
``test_telemetry_services.py``.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import yaml

from streamwal_lab.stack.collector import COLLECTOR_VERSION, collector_config_path

KINDS = ("receivers", "processors", "exporters", "extensions")

#: The first otelcol-contrib whose OTLP gRPC exporter is named ``otlp_grpc``
#: (open-telemetry/opentelemetry-collector#14403, released in v0.144.0); ``otlp`` stays a
#: deprecated alias there. Older releases know only ``otlp``.
CONTRIB_MIN_VERSION = (0, 144, 0)

#: Component modules and the component types they register (aliases included).
MODULE_TYPES: dict[str, tuple[str, frozenset[str]]] = {
    "go.opentelemetry.io/collector/receiver/otlpreceiver": ("receivers", frozenset({"otlp"})),
    "go.opentelemetry.io/collector/processor/batchprocessor": ("processors", frozenset({"batch"})),
    "go.opentelemetry.io/collector/exporter/otlpexporter": (
        "exporters",
        frozenset({"otlp_grpc", "otlp"}),
    ),
    "go.opentelemetry.io/collector/exporter/debugexporter": ("exporters", frozenset({"debug"})),
    "github.com/open-telemetry/opentelemetry-collector-contrib/extension/healthcheckextension": (
        "extensions",
        frozenset({"health_check"}),
    ),
}

#: Part of what otelcol-contrib ships, pinned from the distribution's manifest:
#: https://github.com/open-telemetry/opentelemetry-collector-releases/blob/main/
#: distributions/otelcol-contrib/manifest.yaml
#: Only the collector-core components it bundles and the contrib health check are listed
#: (the whole manifest has a few hundred); ids as of CONTRIB_MIN_VERSION.
CONTRIB_MODULES = frozenset(
    {
        "go.opentelemetry.io/collector/receiver/nopreceiver",
        "go.opentelemetry.io/collector/receiver/otlpreceiver",
        "go.opentelemetry.io/collector/processor/batchprocessor",
        "go.opentelemetry.io/collector/processor/memorylimiterprocessor",
        "go.opentelemetry.io/collector/exporter/debugexporter",
        "go.opentelemetry.io/collector/exporter/nopexporter",
        "go.opentelemetry.io/collector/exporter/otlpexporter",
        "go.opentelemetry.io/collector/exporter/otlphttpexporter",
        "go.opentelemetry.io/collector/extension/zpagesextension",
        "github.com/open-telemetry/opentelemetry-collector-contrib/extension/healthcheckextension",
    }
)
CONTRIB_IDS: dict[str, frozenset[str]] = {
    "receivers": frozenset({"nop", "otlp"}),
    "processors": frozenset({"batch", "memory_limiter"}),
    "exporters": frozenset({"debug", "nop", "otlp_grpc", "otlp", "otlp_http", "otlphttp"}),
    "extensions": frozenset({"zpages", "health_check"}),
}


def _config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(collector_config_path().read_text())
    return loaded


def _manifest() -> dict[str, Any]:
    text = resources.files("streamwal_lab.stack").joinpath("otelcol-builder.yaml").read_text()
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def _used_types() -> dict[str, set[str]]:
    """``kind -> component types`` of the config (``otlp_grpc/jaeger`` is of type ``otlp_grpc``)."""
    config = _config()
    return {kind: {name.split("/")[0] for name in config.get(kind) or {}} for kind in KINDS}


def _built_modules() -> dict[str, set[str]]:
    manifest = _manifest()
    return {kind: {e["gomod"].split()[0] for e in manifest.get(kind) or []} for kind in KINDS}


def _version(text: str) -> tuple[int, ...]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", text.strip())
    assert match, text
    return tuple(int(g) for g in match.groups())


def test_every_component_is_in_the_stack_build() -> None:
    built = _built_modules()
    for kind, modules in built.items():
        for module in modules:
            assert module in MODULE_TYPES, f"{module}: add its component types to this test"
            assert MODULE_TYPES[module][0] == kind, module
    for kind, types in _used_types().items():
        available = set().union(*(MODULE_TYPES[m][1] for m in built[kind]))
        assert types <= available, f"{kind} not in otelcol-builder.yaml: {types - available}"


def test_every_component_is_in_otelcol_contrib() -> None:
    for kind, types in _used_types().items():
        assert types, f"no {kind} in otel-collector.yaml"
        assert types <= CONTRIB_IDS[kind], (
            f"{kind} not in otelcol-contrib: {types - CONTRIB_IDS[kind]}"
        )
    # What the stack builds is a subset of contrib, so a config valid there is valid here.
    built = set().union(*_built_modules().values())
    assert built <= CONTRIB_MODULES, built - CONTRIB_MODULES


def test_the_otlp_grpc_name_and_the_minimum_contrib_version_are_documented() -> None:
    assert "otlp_grpc" in _used_types()["exporters"]
    minimum = "v" + ".".join(str(n) for n in CONTRIB_MIN_VERSION[:2])
    header = collector_config_path().read_text().split("\nextensions:")[0]
    assert f"otelcol-contrib ({minimum} or later)" in header
    # The stack's own build must know the new name too.
    assert _version(_manifest()["dist"]["version"]) >= CONTRIB_MIN_VERSION
    assert _version(COLLECTOR_VERSION) >= CONTRIB_MIN_VERSION


def test_pipelines_use_only_declared_components() -> None:
    config = _config()
    service = config["service"]
    assert set(service.get("extensions") or []) <= set(config["extensions"])
    for name, pipeline in service["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            used = set(pipeline.get(kind) or [])
            assert used <= set(config[kind]), f"pipeline {name}: {used - set(config[kind])}"
