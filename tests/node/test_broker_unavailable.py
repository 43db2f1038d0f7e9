"""A node whose broker cannot be reached answers AssignChannel with UNAVAILABLE, and
never says it serves.

Without ``wal.first_time_tick_backoff.max_attempts`` an open retries until the caller's deadline
and the client sees DEADLINE_EXCEEDED, which does not say what went wrong; with it,
the open gives up after that many attempts and the client is told the broker did
not answer, so it can retry later or elsewhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from streamwal.node.client import NodeClient
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess, free_port

pytestmark = pytest.mark.integration

_ATTEMPTS = 3
_OPERATION_TIMEOUT_S = 1


async def test_assign_with_the_broker_unreachable_is_unavailable(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    nowhere = free_port()  # bound and released: nothing listens there
    node = NodeProcess(
        tmp_path,
        1,
        {
            "pulsar": {
                "service_url": f"pulsar://127.0.0.1:{nowhere}",
                "operation_timeout_s": _OPERATION_TIMEOUT_S,
            },
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"key_prefix": etcd_prefix("unavailable")},
            "wal": {
                "first_time_tick_backoff": {
                    "max_attempts": _ATTEMPTS,
                    "initial": 0.02,
                    "maximum": 0.2,
                },
            },
        },
    )
    await node.start(until=b"listening on")  # never ready: it cannot reach its broker
    try:
        async with NodeClient(node.address) as client:
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.assign(f"unreachable-{unique}", timeout=60)
            elapsed = time.monotonic() - started
            listing = await client.list_channels()
    finally:
        assert await node.terminate() == 0
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value.details()
    details = err.value.details() or ""
    assert f"unreachable-{unique}" in details and "broker" in details, details
    # each attempt waits at most for the exclusivity probe (3 operation timeouts)
    assert elapsed < _ATTEMPTS * 3 * _OPERATION_TIMEOUT_S + 5, elapsed
    assert node.log_text().count("first time tick attempt") == _ATTEMPTS - 1
    assert f"unreachable-{unique}" not in [c.pchannel for c in listing.channels]
    # it listened but never served: nothing says it did
    assert "serving on" not in node.log_text() and "ready on" not in node.log_text()
    assert "not ready until the broker answers" in node.log_text()
