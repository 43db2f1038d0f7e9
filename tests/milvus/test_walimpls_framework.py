"""Milvus's own WAL conformance framework (``walimpls.NewWALImplsTestFramework``)
against a real node, through the Go adaptor in ``adaptors/milvus``.

The framework opens three channels concurrently, each under terms 1 to 3 (and a
fourth for truncation), appends from five goroutines plus one TimeTick per term, and
reads with all four policies while appending; it fails on any message it did not
write. It runs twice: with the owner's reads, and with every read a read-only one
(``ConsumeRequest.read_only``), the path of a reader that does not own the channel.

Two more tests cover what the framework leaves out, through the same adaptor: a
takeover by a second node with a higher term (the first node's appends are Milvus's
``ErrFenced``, every time; its stale term is refused), read back read-only; and what
a truncation leaves readable.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.process import die_with_parent
from tests.milvus.go_build import ADAPTOR, go_env, go_run
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration

#: messages per term per channel, as Milvus's own Pulsar and Kafka tests run it: a run
#: of 3 channels x 4 terms takes seconds on a two-core machine
MESSAGES = 100
#: the framework waits for its TimeTick without a bound: a node that drops it would
#: hang the run, so the binary's own timeout ends it (and prints every goroutine)
RUN_TIMEOUT_S = 50
#: the first build downloads and compiles Milvus's pkg/v2 (minutes); later ones link
BUILD_TIMEOUT_S = 1500

# testify's "Error:" field and its continuation line (the error itself)
_ERROR_FIELD = re.compile(r"^\s+Error:\s+(.*)\n(?:\s+\t(?![A-Z][a-z]+:)(.*)\n)?", re.M)
#: the framework names its channels test_<i>_<10 random letters>
_CHANNEL = re.compile(r"test_\d_[A-Za-z]{10}")
_HUNG = "panic: test timed out"


@pytest.fixture(scope="module")
def framework_binary(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    """Milvus's framework and the adaptor, compiled into one test binary."""
    out = tmp_path_factory.mktemp("milvus") / "walimpls.test"
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # the first build is slow: show it
        print(file=sys.stderr)
        done = go_run(
            ["test", "-tags", "test", "-c", "-o", str(out), "./streamwal"],
            say="building Milvus's walimpls framework with the adaptor (go test -c; the "
            "first build downloads and compiles Milvus's pkg/v2 and its dependencies)",
            timeout=BUILD_TIMEOUT_S,
        )
    if done.returncode != 0:  # a build that fails is a failure, not a skip
        pytest.fail(f"go test -c failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return out


@pytest.fixture(scope="module")
def key_prefix(module_etcd_prefix: Callable[[str], str]) -> str:
    """The nodes' etcd prefix: the TSO's keys, and the channels' terms, which both
    nodes must see."""
    return module_etcd_prefix("milvus")


@pytest.fixture(scope="module")
async def node(
    stack: StackInfo, tmp_path_factory: pytest.TempPathFactory, key_prefix: str
) -> AsyncIterator[NodeProcess]:
    """One standalone node on the shared stack (truncation needs the admin API)."""
    process = NodeProcess(
        tmp_path_factory.mktemp("milvus-node"),
        1,
        {
            "pulsar": {"service_url": stack.pulsar_url, "admin_url": stack.pulsar_admin_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"mode": "in-process", "key_prefix": key_prefix},
        },
    )
    await process.start()
    try:
        yield process
    finally:
        await process.terminate()


@pytest.fixture(scope="module")
async def node_two(
    stack: StackInfo, tmp_path_factory: pytest.TempPathFactory, node: NodeProcess, key_prefix: str
) -> AsyncIterator[NodeProcess]:
    """A second node on the same broker and etcd prefix, its timestamps from the first."""
    process = NodeProcess(
        tmp_path_factory.mktemp("milvus-node-2"),
        2,
        {
            "pulsar": {"service_url": stack.pulsar_url, "admin_url": stack.pulsar_admin_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"mode": "remote", "remote_addresses": [node.address], "key_prefix": key_prefix},
        },
    )
    await process.start()
    try:
        yield process
    finally:
        await process.terminate()


async def _run_go_test(binary: Path, test: str, env: dict[str, str]) -> None:
    """Run one Go test of the binary; a failed assertion says what the framework saw."""
    proc = await asyncio.create_subprocess_exec(
        *die_with_parent(),
        str(binary),
        f"-test.run=^{test}$",
        "-test.v",
        "-test.count=1",
        f"-test.timeout={RUN_TIMEOUT_S}s",
        cwd=ADAPTOR / "streamwal",
        env={**go_env(), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S + 30)
    output = out.decode(errors="replace")
    if "--- SKIP" in output:  # the environment above did not reach it: not a result
        pytest.fail(f"{test} skipped itself:\n{output[-2000:]}")
    assert proc.returncode == 0 and f"--- PASS: {test}" in output, _summary(output)


def _summary(output: str) -> str:
    """Each distinct assertion failure once, with its count; whether the run hung; the
    output's head (the goroutine dump of a hang is left out)."""
    counts: dict[str, int] = {}
    for field, detail in _ERROR_FIELD.findall(output):
        text = _CHANNEL.sub("test_N", f"{field} {detail}".strip())
        counts[text] = counts.get(text, 0) + 1
    errors = "\n".join(f"{n:5d} x {text}" for text, n in counts.items())
    head = output.split(_HUNG, 1)[0]
    hung = (
        f"the run hung until -test.timeout={RUN_TIMEOUT_S}s (a reader waited for a "
        "message that never came)\n"
        if _HUNG in output
        else ""
    )
    return f"distinct failures:\n{errors or '(none)'}\n{hung}--- output ---\n{head[-5000:]}"


@pytest.mark.timeout(BUILD_TIMEOUT_S + 120)
@pytest.mark.parametrize("reads", ["owner", "read-only"])
async def test_milvus_walimpls_framework_passes_on_a_node(
    framework_binary: Path, node: NodeProcess, reads: str
) -> None:
    await _run_go_test(
        framework_binary,
        "TestWALImplsFramework",
        {
            "STREAMWAL_MILVUS_NODE": node.address,
            "STREAMWAL_MILVUS_MESSAGES": str(MESSAGES),
            "STREAMWAL_MILVUS_READ_ONLY": "1" if reads == "read-only" else "0",
        },
    )


@pytest.mark.timeout(BUILD_TIMEOUT_S + 120)
async def test_a_takeover_through_the_adaptor(
    framework_binary: Path, node: NodeProcess, node_two: NodeProcess
) -> None:
    await _run_go_test(
        framework_binary,
        "TestTakeoverThroughTheAdaptor",
        {"STREAMWAL_MILVUS_NODE": node.address, "STREAMWAL_MILVUS_OTHER_NODE": node_two.address},
    )


@pytest.mark.timeout(BUILD_TIMEOUT_S + 120)
async def test_truncate_through_the_adaptor(framework_binary: Path, node: NodeProcess) -> None:
    """Truncate(id) is inclusive; "all" starts at the first message kept; a read from a
    truncated id is OUT_OF_RANGE."""
    await _run_go_test(
        framework_binary, "TestTruncateThroughTheAdaptor", {"STREAMWAL_MILVUS_NODE": node.address}
    )
