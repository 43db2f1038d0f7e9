"""Building and running the Milvus adaptor's Go code (``adaptors/milvus``) from tests.

Go compiles into its own caches (the module cache and the build cache), so only a
checkout's first build downloads and compiles Milvus's ``pkg/v2`` and its
dependencies (minutes on a small machine); later builds only link.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

__all__ = ["ADAPTOR", "go_command", "go_env", "go_run"]

ADAPTOR = Path(__file__).resolve().parents[2] / "adaptors" / "milvus"

#: the floor of adaptors/milvus/go.mod's ``go`` line
_GO_NEEDED = "Go 1.24 or newer (the `go` command on PATH)"


def go_command() -> str:
    """The ``go`` executable; a clear failure that says what to install without it."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(
            f"the Milvus adaptor (adaptors/milvus) is Go code: install {_GO_NEEDED}; "
            "the local stack's collector and Jaeger are built with it too"
        )
    return go


def go_env() -> dict[str, str]:
    """The environment for ``go``: go.mod and go.sum are updated if a pin moved
    (``-mod=mod``), with the proxy and caches the machine has; a ``go.work`` in some
    parent folder does not change what is built (``GOWORK=off``)."""
    flags = os.environ.get("GOFLAGS", "")
    if "-mod=" not in flags:
        flags = f"{flags} -mod=mod".strip()
    return {**os.environ, "GOFLAGS": flags, "GOWORK": "off"}


def go_run(
    args: list[str], *, say: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``go ARGS`` in the adaptor's module, announced (``say``) with its time."""
    started = time.monotonic()
    print(f"milvus adaptor: {say} ...", flush=True)
    done = subprocess.run(
        [go_command(), *args],
        cwd=ADAPTOR,
        env=env or go_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(f"milvus adaptor: {say}: exit {done.returncode} after {time.monotonic() - started:.1f} s")
    return done
