"""What status a node answers a call with, for tests that expect refusals."""

from __future__ import annotations

from collections.abc import Awaitable

import grpc

__all__ = ["code_of"]


async def code_of(call: Awaitable[object]) -> grpc.StatusCode | None:
    """The status ``call`` fails with, ``None`` when it succeeds: a test compares codes
    rather than catching each refusal itself."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return None
