"""Compile every ``*/proto/*.proto`` of the project into Python modules beside it.

Generated code is never committed: ``./dev`` runs this after installing, and it is
cheap to run again (it skips protos whose outputs are newer).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("streamwal/tso", "streamwal/node")


def _stale(proto: Path) -> bool:
    out = proto.with_name(proto.stem + "_pb2.py")
    grpc_out = proto.with_name(proto.stem + "_pb2_grpc.py")
    return not out.exists() or not grpc_out.exists() or out.stat().st_mtime < proto.stat().st_mtime


def main() -> int:
    from grpc_tools import protoc  # type: ignore[import-untyped]  # dev dependency, generating only

    protos = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).glob("**/proto/*.proto"))]
    for proto in protos:
        if not _stale(proto):
            continue
        rel = proto.relative_to(ROOT)
        args = [
            "protoc",
            f"-I{ROOT}",
            f"--python_out={ROOT}",
            f"--pyi_out={ROOT}",
            f"--grpc_python_out={ROOT}",
            str(rel),
        ]
        print(f"generating {rel}", flush=True)
        if protoc.main(args) != 0:
            print(f"protoc failed on {rel}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
