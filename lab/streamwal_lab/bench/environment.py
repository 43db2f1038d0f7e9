"""Where a run happened: the machine and the versions of everything measured.

Figures from these benchmarks mean little without the machine (cores shared by broker,
client and node) and the versions; both go into every report. Lookups that fail
(a broker without its admin port, no ``/proc``) leave the field empty rather than
failing the run.
"""

from __future__ import annotations

import json
import os
import platform
import urllib.request
from importlib import metadata
from typing import Any

__all__ = ["machine", "versions"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _memory_mib() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return None


def machine() -> dict[str, Any]:
    """CPU, memory, OS and Python of this machine."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_mib": _memory_mib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in load],
    }


def _http_text(url: str, timeout: float = 3.0) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return str(response.read().decode("utf-8", "replace")).strip()
    except (OSError, ValueError):
        return ""


def _package(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def versions(pulsar_admin_url: str | None, etcd_endpoint: str | None) -> dict[str, str]:
    """streamwal, the Pulsar client and broker, etcd and the TSO's etcd client."""
    broker = ""
    if pulsar_admin_url:
        broker = _http_text(f"{pulsar_admin_url.rstrip('/')}/admin/v2/brokers/version")
    etcd = ""
    if etcd_endpoint:
        text = _http_text(f"http://{etcd_endpoint}/version")
        try:
            etcd = str(json.loads(text).get("etcdserver", "")) if text else ""
        except ValueError:
            etcd = ""
    return {
        "streamwal": _package("streamwal"),
        "pulsar_client": _package("pulsar-client"),
        "pulsar_broker": broker,
        "etcd": etcd,
        "python_etcd3": _package("python3-etcd3") or _package("etcd3"),
        "grpcio": _package("grpcio"),
    }
