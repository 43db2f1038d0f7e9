"""Where the stack keeps its downloads (shared, by version) and its data (per stack).

The stack's settings are environment variables, all named here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

__all__ = ["StackPaths"]

ENV_CACHE_DIR = "STREAMWAL_CACHE_DIR"
ENV_STACK_NAME = "STREAMWAL_STACK"
#: built jaeger-ui assets (a folder or an archive) for Jaeger to serve at ``/``
ENV_JAEGER_UI_ASSETS = "STREAMWAL_JAEGER_UI_ASSETS"
#: where Jaeger's release archives are (``off``: never download, build with Go)
ENV_JAEGER_RELEASE_URL = "STREAMWAL_JAEGER_RELEASE_URL"


@dataclass(frozen=True)
class StackPaths:
    """``cache`` holds installed artifacts keyed by version; ``stack`` one stack's data."""

    cache: Path
    stack: Path

    @classmethod
    def default(cls, name: str | None = None, *, profile: str = "standalone") -> StackPaths:
        """A profile other than the standalone one keeps its data in a folder of its
        own (``default-cluster``), so both can run side by side."""
        cache = Path(os.environ.get(ENV_CACHE_DIR) or platformdirs.user_cache_dir("streamwal"))
        stack_name = name or os.environ.get(ENV_STACK_NAME) or "default"
        if profile != "standalone":
            stack_name = f"{stack_name}-{profile}"
        return cls(cache=cache, stack=cache / "stacks" / stack_name)

    def artifact(self, *parts: str) -> Path:
        return self.cache.joinpath("artifacts", *parts)

    def service_dir(self, service: str) -> Path:
        return self.stack / service
