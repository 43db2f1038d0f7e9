"""Write outcomes without a broker: how the node words a failed append, how a client
reads it, what the client retries, and the node's filter for OpenTelemetry's
detach tracebacks (unit)."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from opentelemetry import context as otel_context

from streamwal.errors import (
    ChannelFencedError,
    ChannelNotFoundError,
    OutcomeUnknownError,
    UnavailableError,
    UnknownPositionError,
    WriteOutcome,
    outcome_of,
)
from streamwal.node.client import NodeClient, write_outcome
from streamwal.node.outcome import OUTCOME_KEY
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.servicer import _append_error, grpc_status_for
from streamwal.node.telemetry import _quiet_foreign_detach


def _rpc(
    code: grpc.StatusCode, details: str = "", outcome: str | None = None
) -> grpc.aio.AioRpcError:
    trailing = grpc.aio.Metadata() if outcome is None else grpc.aio.Metadata((OUTCOME_KEY, outcome))
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


def test_the_node_says_unknown_only_of_appends_that_may_have_landed() -> None:
    assert outcome_of(UnavailableError("broker down")) is WriteOutcome.NOT_WRITTEN
    assert outcome_of(ChannelNotFoundError("c")) is WriteOutcome.NOT_WRITTEN
    assert outcome_of(ChannelFencedError("c")) is WriteOutcome.NOT_WRITTEN
    assert outcome_of(ChannelFencedError("c").in_flight()) is WriteOutcome.UNKNOWN
    assert outcome_of(UnknownPositionError("-1:-1")) is WriteOutcome.UNKNOWN
    assert outcome_of(RuntimeError("a bug")) is WriteOutcome.UNKNOWN
    assert not OutcomeUnknownError("x").retriable and UnavailableError("x").retriable
    # UNAVAILABLE means "retry later": an append that may be in the log does not get it
    assert grpc_status_for(UnknownPositionError("-1:-1"))[0] == grpc.StatusCode.UNKNOWN
    assert grpc_status_for(UnavailableError("x"))[0] == grpc.StatusCode.UNAVAILABLE
    in_band = _append_error(ChannelFencedError("c").in_flight()).error
    assert in_band.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert in_band.outcome == pb.OUTCOME_UNKNOWN


def test_error_texts_stay_short_whatever_the_name() -> None:
    code, details = grpc_status_for(ChannelNotFoundError("n" * 10_000))
    assert code == grpc.StatusCode.NOT_FOUND and len(details) < 200
    code, details = grpc_status_for(UnavailableError("x" * 100_000))
    assert len(details) <= 1003


def test_a_client_reads_the_outcome_and_judges_what_the_node_did_not_say() -> None:
    assert write_outcome(_rpc(grpc.StatusCode.UNAVAILABLE, "", "unknown")) is WriteOutcome.UNKNOWN
    assert (
        write_outcome(_rpc(grpc.StatusCode.FAILED_PRECONDITION, "", "not-written"))
        is WriteOutcome.NOT_WRITTEN
    )
    refused = "failed to connect to all addresses; last error: Connection refused"
    assert write_outcome(_rpc(grpc.StatusCode.UNAVAILABLE, refused)) is WriteOutcome.NOT_WRITTEN
    assert write_outcome(_rpc(grpc.StatusCode.UNAVAILABLE, "Socket closed")) is WriteOutcome.UNKNOWN
    assert write_outcome(_rpc(grpc.StatusCode.DEADLINE_EXCEEDED)) is WriteOutcome.UNKNOWN
    assert write_outcome(_rpc(grpc.StatusCode.RESOURCE_EXHAUSTED)) is WriteOutcome.NOT_WRITTEN
    assert write_outcome(ValueError()) is WriteOutcome.UNKNOWN


class _Answers(pb_grpc.StreamingNodeServicer):  # type: ignore[misc]
    """Answers each Produce with the next status of ``script`` (None: success)."""

    def __init__(self, script: list[tuple[grpc.StatusCode, str] | None]) -> None:
        self.script = script
        self.calls = 0
        self.requests: list[pb.ProduceRequest] = []

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.ProduceResponse:
        step = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        self.requests.append(request)
        if step is None:
            return pb.ProduceResponse(message_id=b"id", time_tick=7)
        code, outcome = step
        await context.abort(code, "scripted", trailing_metadata=((OUTCOME_KEY, outcome),))
        raise AssertionError


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[_Answers, str]]:
    answers = _Answers([])
    server = grpc.aio.server()
    pb_grpc.add_StreamingNodeServicer_to_server(answers, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield answers, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def test_the_client_retries_only_what_was_not_written(
    scripted: tuple[_Answers, str],
) -> None:
    answers, address = scripted
    unavailable = grpc.StatusCode.UNAVAILABLE
    # a client that does not number its appends (an idempotent one retries unknowns)
    async with NodeClient(address, tracing=False, retries=3, idempotent=False) as client:
        answers.script = [(unavailable, "not-written"), (unavailable, "not-written"), None]
        assert (await client.produce("c", b"x")).time_tick == 7
        assert answers.calls == 3
        answers.calls, answers.script = 0, [(unavailable, "unknown"), None]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.produce("c", b"x")
        assert write_outcome(err.value) is WriteOutcome.UNKNOWN and answers.calls == 1
        answers.calls, answers.script = 0, [(grpc.StatusCode.FAILED_PRECONDITION, "not-written")]
        with pytest.raises(grpc.aio.AioRpcError):
            await client.produce("c", b"x")
        assert answers.calls == 1  # not written, but retrying the same node cannot help
        answers.calls, answers.script = 0, [(unavailable, "not-written")]
        with pytest.raises(grpc.aio.AioRpcError):
            await client.produce("c", b"x")
        assert answers.calls == 4  # the first try and three retries


async def test_an_idempotent_client_retries_unknown_outcomes_with_the_same_numbers(
    scripted: tuple[_Answers, str],
) -> None:
    answers, address = scripted
    async with NodeClient(address, tracing=False, retries=3) as client:
        answers.script = [
            (grpc.StatusCode.UNKNOWN, "unknown"),
            (grpc.StatusCode.UNAVAILABLE, "unknown"),
            None,
        ]
        acked = await client.produce("c", b"x")
        assert answers.calls == 3
        assert client.producer is not None
        seen = [(r.producer_id, r.sequence) for r in answers.requests]
        assert seen == [(client.producer.producer_id, 0)] * 3  # every retry: the same numbers
        assert (acked.producer_id, acked.sequence) == seen[0]
        answers.calls, answers.script = 0, [None]
        await client.produce("c", b"y")
        last = answers.requests[-1]
        assert (last.producer_id, last.sequence) == (client.producer.producer_id, 1)


def test_a_context_reset_from_another_context_logs_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What a client that goes away mid-stream leads to (see node.telemetry)."""
    _quiet_foreign_detach()
    token = otel_context.attach(otel_context.set_value("k", "v"))
    with caplog.at_level(logging.DEBUG, logger="opentelemetry.context"):
        contextvars.Context().run(otel_context.detach, token)
    assert not [r for r in caplog.records if r.name == "opentelemetry.context"]
    otel_context.detach(token)  # in its own context: a clean reset
    logging.getLogger("opentelemetry.context").exception("Failed to detach context")
    assert [r for r in caplog.records if r.name == "opentelemetry.context"]  # others still pass
