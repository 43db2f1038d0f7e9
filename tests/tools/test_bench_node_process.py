"""A bench node stopped by a cancelled task is killed and reaped before the task ends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal.tools.bench.node_process import BenchNode
from streamwal.tools.bench.target import BenchTarget
from streamwal.tools.stack import StackInfo

pytestmark = pytest.mark.integration


async def test_a_stop_cancelled_midway_still_reaps_the_node(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str]
) -> None:
    target = BenchTarget(stack.pulsar_url, stack.etcd_endpoint, stack.pulsar_admin_url)
    prefix = etcd_prefix("bench-proc")
    node = BenchNode(target, key_prefix=prefix, log_path=tmp_path / "node.log")
    await node.__aenter__()
    proc = node._proc
    assert proc is not None and proc.returncode is None

    stopping = asyncio.create_task(node.__aexit__(None, None, None))
    await asyncio.sleep(0)  # the stop sends SIGTERM and starts waiting for the exit
    assert not stopping.done() and proc.returncode is None
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert proc.returncode is not None  # waited for, not left to the garbage collector
