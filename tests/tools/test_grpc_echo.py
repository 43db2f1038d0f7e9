"""The bench's gRPC echo server: its answers, and the wait its delayed calls keep."""

from __future__ import annotations

import asyncio
import time

import pytest

from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.telemetry import NODE_ID_ATTRIBUTE
from streamwal.node.trace.query import SpanSummary, find_traces, span_summaries
from streamwal_lab.bench.grpc_echo import EchoServer
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration  # a child process with a gRPC server


async def _timed(call: object, n: int) -> float:
    """The mean seconds of ``n`` calls one after the other."""
    started = time.perf_counter()
    for _ in range(n):
        answer = await call(b"x" * 128)  # type: ignore[operator]
        assert isinstance(answer, pb.ProduceResponse) and answer.time_tick > 0
    return (time.perf_counter() - started) / n


async def test_delayed_calls_wait_what_was_asked_and_report_it() -> None:
    async with EchoServer() as echo:
        delayed = echo.open_stream(delayed=True)
        plain = echo.open_stream()
        try:
            assert await echo.set_delay(0.02) == 0.0  # nothing delayed was answered yet
            unary_s = await _timed(echo.unary_after, 10)
            stream_s = await _timed(delayed.append, 10)
            waited = await echo.set_delay(0.0)
            # the timer's lateness is learnt and asked less of: the mean is near the delay
            assert 0.015 <= waited <= 0.03
            assert unary_s >= 0.015 and stream_s >= 0.015
            # the undelayed calls, and the delayed ones once the delay is back to 0, do not wait
            assert await _timed(echo.unary, 10) < 0.015
            assert await _timed(plain.append, 10) < 0.015
            assert await _timed(delayed.append, 10) < 0.015
            assert await echo.set_delay(0.0) < 0.005  # the last period's mean: no wait
        finally:
            await asyncio.gather(delayed.close(), plain.close())


async def test_calls_outside_the_block_are_refused() -> None:
    echo = EchoServer()
    with pytest.raises(RuntimeError, match="outside its async with block"):
        await echo.set_delay(0.01)
    with pytest.raises(RuntimeError, match="outside its async with block"):
        echo.open_stream(delayed=True)


async def test_the_traced_server_spans_each_call_as_the_node_does(
    telemetry_stack: StackInfo, unique: str
) -> None:
    service = f"streamwal-test-echo-{unique}"
    async with EchoServer(
        traced=True, otlp_endpoint=telemetry_stack.otlp_endpoint, service_name=service
    ) as echo:
        await echo.set_delay(0.001)
        for _ in range(3):
            await echo.unary_after(b"x" * 16)
        stream = echo.open_stream(delayed=True)
        await stream.append(b"y")
        await stream.close()
    # leaving the block stopped the child gracefully: its last spans were flushed
    assert telemetry_stack.jaeger_url is not None
    traces = await find_traces(telemetry_stack.jaeger_url, service, min_spans=4, timeout=30.0)
    by_name: dict[str, list[SpanSummary]] = {}
    for trace in traces:
        for span in span_summaries(trace):
            if span.service == service:
                by_name.setdefault(span.operation, []).append(span)
    unary = by_name.get("/streamwal.bench.Echo/ProduceAfter", [])
    assert len(unary) == 3, sorted(by_name)
    assert len(by_name.get("/streamwal.bench.Echo/ProduceStreamAfter", [])) == 1
    for span in unary:
        assert span.tags["span.kind"] == "server"
        assert span.tags["rpc.method"] == "ProduceAfter"
        assert span.tags[NODE_ID_ATTRIBUTE] == 1
        assert span.duration_us >= 500  # it waited the delay inside the span
