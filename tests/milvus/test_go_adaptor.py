"""The Milvus adaptor's own Go checks, and its generated gRPC code is current.

The generated Go (``adaptors/milvus/streamingpb``) is committed so a build needs no
code generator; after editing ``streaming.proto`` run ``scripts/gen_go_protos.py``.
The protoc version line is left out of the comparison (a newer grpcio-tools is not a
change of schema).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.milvus.go_build import ADAPTOR, go_run

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import gen_go_protos  # noqa: E402

_PROTOC_VERSION = re.compile(r"^//\s+(?:- )?protoc\s+v\S+$", re.M)
_GENERATED = ("streamingpb/streaming.pb.go", "streamingpb/streaming_grpc.pb.go")


def test_committed_go_stubs_match_the_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    assert gen_go_protos.generate(tmp_path) == 0
    for rel in _GENERATED:
        fresh = _PROTOC_VERSION.sub("", (tmp_path / rel).read_text())
        committed = _PROTOC_VERSION.sub("", (ADAPTOR / rel).read_text())
        assert committed == fresh, f"adaptors/milvus/{rel} is stale: run scripts/gen_go_protos.py"


@pytest.mark.timeout(1500)
def test_adaptor_unit_tests_and_vet() -> None:
    """Message ids order like the log and round-trip the node's bytes; a fenced
    append is Milvus's ErrFenced; ``go vet`` (with the framework's build tag) is clean."""
    vet = go_run(["vet", "-tags", "test", "./..."], say="go vet", timeout=1500)
    assert vet.returncode == 0, vet.stdout + vet.stderr
    unit = go_run(["test", "-count=1", "./..."], say="go test (unit)", timeout=600)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert "ok  \tstreamwal/adaptors/milvus/streamwal" in unit.stdout, unit.stdout
