"""The README's ``ClusterClient`` snippet runs as written against real node processes
of a self-managing cluster, and everything it wrote is read back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal_lab.stack import StackInfo
from tests.cluster.harness import TestCluster
from tests.doc_snippets import python_block
from tests.node.processes import run_python
from tests.node.processes import shown as shown_of

pytestmark = pytest.mark.integration


def client_snippet() -> str:
    """The README's ``ClusterClient`` snippet, verbatim."""
    return python_block("README.md", "### Through the nodes: `ClusterClient`")


async def test_the_readme_cluster_client_snippet_runs(
    make_cluster: Callable[..., TestCluster],
    stack: StackInfo,
    tmp_path: Path,
) -> None:
    cluster = make_cluster(1)
    await cluster.start(1)
    await cluster.wait_balanced()
    channel = cluster.channels[0]
    snippet = client_snippet().replace('"orders"', repr(channel))
    addresses = [p.address for p in cluster.nodes.values()]
    snippet += f"\n\nasyncio.run(main({addresses!r}))\n"
    script = tmp_path / "client.py"
    script.write_text(snippet)
    code, out, err = await run_python(str(script), timeout=120)
    assert code == 0, shown_of(out, err)
    lines = out.splitlines()
    payloads = [line.split()[0] for line in lines if line.startswith("b'")]
    # everything written is read back, in the order written; the transaction's
    # message with its commit; the read ended when the snippet asked it to
    assert payloads == ["b'one'", "b'two'", "b'three'", "b'four'", "b'five'", "b'six'"], lines
