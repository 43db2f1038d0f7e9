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


def generate(out: Path = ROOT) -> int:
    from grpc_tools import protoc  # type: ignore[import-untyped]  # dev dependency, generating only

    for rel in protos():
        args = [
            "protoc",
            f"-I{ROOT}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(rel),
        ]
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        if protoc.main(args) != 0:
            print(f"protoc failed on {rel}", file=sys.stderr)
            return 1
    return 0


def main(argv: list[str]) -> int:
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else ROOT
    return generate(out)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
