"""The committed gRPC modules are what their ``.proto`` compiles to.

They are committed so that installing needs no code generator; after editing a
``.proto`` run ``scripts/gen_protos.py``. The generator's version lines are left out
of the comparison (a newer ``grpcio-tools`` in the dev install is not a change of
schema); the runtime floors in pyproject must cover the version that generated them.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gen_protos  # noqa: E402

_VERSION_LINES = re.compile(
    r"^(# Protobuf Python Version: .*|GRPC_GENERATED_VERSION = .*|\s+\d+,\s*$)", re.M
)


def _normal(text: str) -> str:
    return _VERSION_LINES.sub("", text)


def _generated() -> list[Path]:
    out = []
    for proto in gen_protos.protos():
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            out.append(proto.with_name(proto.stem + suffix))
    return out


def test_every_proto_has_committed_modules() -> None:
    assert gen_protos.protos(), "no .proto found"
    for rel in _generated():
        assert (ROOT / rel).is_file(), f"{rel} is missing: run scripts/gen_protos.py"


def test_committed_modules_match_their_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    assert gen_protos.generate(tmp_path) == 0
    for rel in _generated():
        fresh = (tmp_path / rel).read_text()
        committed = (ROOT / rel).read_text()
        assert _normal(committed) == _normal(fresh), (
            f"{rel} differs from its .proto: run scripts/gen_protos.py"
        )


def _floor(requirement: str) -> tuple[int, ...]:
    match = re.search(r">=\s*([\d.]+)", requirement)
    assert match, requirement
    return tuple(int(x) for x in match.group(1).split("."))


def test_the_runtime_floors_cover_the_generator() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    by_name = {re.split(r"[<>=!~\[ ]", d, maxsplit=1)[0]: d for d in deps}
    for rel in _generated():
        text = (ROOT / rel).read_text()
        if m := re.search(r"# Protobuf Python Version: ([\d.]+)", text):
            assert _floor(by_name["protobuf"]) >= tuple(int(x) for x in m.group(1).split("."))
        if m := re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", text):
            assert _floor(by_name["grpcio"]) >= tuple(int(x) for x in m.group(1).split("."))
