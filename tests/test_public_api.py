"""``import streamwal`` is the library's front door: small, documented, complete."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import streamwal
from streamwal import environment
from streamwal.tso.etcd_store import EtcdStore
from streamwal_lab.stack import StackInfo
from tests.doc_snippets import python_block


def test_every_exported_name_exists_and_is_documented() -> None:
    for name in streamwal.__all__:
        value = getattr(streamwal, name)
        if name != "__version__":
            assert value.__doc__, f"streamwal.{name} has no docstring"
    assert len(streamwal.__all__) <= 25, "the front door is meant to stay small"


def test_the_front_door_is_what_a_user_needs() -> None:
    front_door = {
        "open_wal", "open_read_only", "WALConfig", "DeliveryPolicy",
        "MutableMessage", "ImmutableMessage", "MessageType",
        "PulsarOpener", "PulsarConfig", "InProcessTSO", "TsoConfig", "EtcdConfig", "ClusterClient",
        "StreamwalError", "ChannelFencedError", "UnavailableError", "OutcomeUnknownError",
        "ClosedError", "TruncatedError", "BatchAppendError", "TransactionError",
        "SequenceError", "__version__",
    }  # fmt: skip
    assert set(streamwal.__all__) == front_door
    assert len(streamwal.__all__) == len(front_door)


def test_the_rest_stays_in_its_module() -> None:
    # internal errors and the WAL's inner types are no longer at the front door,
    # and still where they live
    for name in ("NotLeaderError", "EvictedError", "WriteOutcome", "InvalidInputError"):
        assert name not in streamwal.__all__
        assert getattr(streamwal.errors, name).__doc__
    assert streamwal.wal.WAL.__doc__
    assert streamwal.tso.LocalAllocator.__doc__


def test_exported_names_are_the_sub_packages_own() -> None:
    assert streamwal.ClosedError is streamwal.errors.ClosedError
    assert streamwal.open_wal is streamwal.wal.open_wal
    assert streamwal.InProcessTSO is streamwal.tso.InProcessTSO
    assert streamwal.TransactionError is streamwal.errors.TransactionError


def test_import_streamwal_leaves_the_cluster_client_until_it_is_used() -> None:
    code = (
        "import sys, streamwal\n"
        "assert 'streamwal.cluster' not in sys.modules, 'import streamwal loaded the cluster'\n"
        "from streamwal import ClusterClient\n"
        "import streamwal.cluster\n"
        "assert ClusterClient is streamwal.cluster.ClusterClient\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_the_version_is_the_distributions() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "streamwal.cli", "--version"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == f"streamwal {streamwal.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", streamwal.__version__)


def quickstart() -> str:
    """The README's Python quickstart, verbatim."""
    return python_block("README.md", "## Python quickstart")


@pytest.mark.integration
async def test_the_readme_quickstart_runs(stack: StackInfo, tmp_path: Path) -> None:
    code = quickstart()
    # the snippet takes the product's defaults, which the environment points at the stack
    assert "streamwal.PulsarConfig()" in code
    assert "etcd_endpoints" not in code
    assert os.environ[environment.PULSAR_SERVICE_URL] == stack.pulsar_url
    assert os.environ[environment.ETCD_ENDPOINTS] == stack.etcd_endpoint
    (tmp_path / "quickstart.py").write_text(code)
    try:
        out = subprocess.run(
            [sys.executable, "quickstart.py"], cwd=tmp_path, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
    finally:
        async with EtcdStore([stack.etcd_endpoint]) as store:
            await store.delete_prefix("/quickstart/", timeout=5.0)
    assert out.returncode == 0, out.stderr
    kind, payload, time_tick = out.stdout.split()
    assert (kind, payload) == ("Insert", "b'hello'")
    assert int(time_tick) > 0
