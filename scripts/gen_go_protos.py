"""Compile the node's ``streaming.proto`` into Go for the Milvus adaptor (``adaptors/milvus``).

The generated Go is committed, so building the adaptor needs no code generator; run
this after editing the ``.proto`` (``tests/milvus/test_go_generated.py`` fails until
then). protoc is the one in grpcio-tools (the dev dependencies); the two Go plugins
are built from the versions ``adaptors/milvus/go.mod`` pins as tools, so every
checkout generates the same bytes. ``--out DIR`` writes under DIR instead of the
adaptor's folder (the test compares such a copy with the committed one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gen_protos import out_of, run_protoc  # this folder: scripts run as scripts

ROOT = Path(__file__).resolve().parent.parent
ADAPTOR = ROOT / "adaptors" / "milvus"
PROTO = "streamwal/node/proto/streaming.proto"
GO_MODULE = "streamwal/adaptors/milvus"
GO_PACKAGE = f"{GO_MODULE}/streamingpb"
PLUGINS = {
    "protoc-gen-go": "google.golang.org/protobuf/cmd/protoc-gen-go",
    "protoc-gen-go-grpc": "google.golang.org/grpc/cmd/protoc-gen-go-grpc",
}


def _build_plugins(into: Path) -> None:
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    for name, package in PLUGINS.items():
        subprocess.run(
            ["go", "build", "-o", str(into / name), package], cwd=ADAPTOR, env=env, check=True
        )


def generate(out: Path = ADAPTOR) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = Path(tmp)
        _build_plugins(bin_dir)
        mapping = f"M{PROTO}={GO_PACKAGE}"
        args = [
            f"--plugin=protoc-gen-go={bin_dir / 'protoc-gen-go'}",
            f"--plugin=protoc-gen-go-grpc={bin_dir / 'protoc-gen-go-grpc'}",
            f"--go_out={out}",
            f"--go_opt=module={GO_MODULE},{mapping}",
            f"--go-grpc_out={out}",
            f"--go-grpc_opt=module={GO_MODULE},{mapping}",
            PROTO,
        ]
        out.mkdir(parents=True, exist_ok=True)
        return 0 if run_protoc(args, PROTO) else 1


def main(argv: list[str]) -> int:
    return generate(out_of(argv, ADAPTOR))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
