"""Compile every ``*/proto/*.proto`` of the project into Python modules beside it.

The generated modules are committed, so an install needs no code generator; run this
after editing a ``.proto`` (``tests/test_generated_code.py`` fails until then). It
compiles through the ``streamwal/`` paths, so the modules import each other as
``streamwal.tso.proto...``. ``--out DIR`` writes beside copies under DIR instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("streamwal/tso", "streamwal/node", "streamwal/cluster")


def protos() -> list[Path]:
    """Every ``.proto``, relative to the repository root, through ``streamwal/``."""
    return [
        p.relative_to(ROOT)
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).glob("**/proto/*.proto"))
    ]


def run_protoc(args: list[str], what: str) -> bool:
    """protoc of grpcio-tools (a dev dependency: generating only) on ``args``; False,
    said on stderr, when it fails."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    if protoc.main(["protoc", f"-I{ROOT}", *args]) == 0:
        return True
    print(f"protoc failed on {what}", file=sys.stderr)
    return False


def out_of(argv: list[str], default: Path) -> Path:
    """``--out DIR`` of the command line, or ``default``."""
    return Path(argv[argv.index("--out") + 1]) if "--out" in argv else default


def generate(out: Path = ROOT) -> int:
    for rel in protos():
        args = [f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", str(rel)]
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        if not run_protoc(args, str(rel)):
            return 1
    return 0


def main(argv: list[str]) -> int:
    return generate(out_of(argv, ROOT))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
