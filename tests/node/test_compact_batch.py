"""The compact ``ProduceBatchResponse`` (runs of a pack) stands for exactly the
per-message answer: built by the node's answer builder, expanded by the client (unit:
the pure functions, and the real servicer and client over the in-process backend)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.errors import DecodeError
from streamwal.node.client import Acked, NodeClient, policy
from streamwal.node.client.answers import acked_of, batch_acks, expand_runs
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.responses import compact_batch_response, produce_response
from streamwal.wal.interceptors import AppendResult
from streamwal.wal.message_id import MessageId
from tests.node.memory_node import CounterSource, memory_node

CHANNEL = "compact"


def _per_message(results: list[AppendResult]) -> list[Acked]:
    return [acked_of(produce_response(r), None) for r in results]


def _pulsar_results() -> list[AppendResult]:
    """Every case a run must be cut at: a pack of one (the entry's id), a pack joined
    part way, the next entry, a tick that skips, Pulsar's own batch index on a
    pack of one, a new ledger."""
    ids: list[tuple[MessageId, int]] = [
        (PulsarMessageId(7, 3), 100),  # a pack of one
        (PulsarMessageId(7, 4, 2), 101),  # joined a pack at index 2
        (PulsarMessageId(7, 4, 3), 102),
        (PulsarMessageId(7, 4, 4), 103),
        (PulsarMessageId(7, 5, 0), 104),  # the next entry
        (PulsarMessageId(7, 5, 1), 105),
        (PulsarMessageId(7, 5, 2), 107),  # a tick that does not follow: a new run
        (PulsarMessageId(7, 5, 3), 108),
        (PulsarMessageId(7, 6, 0), 109),  # a pack of one inside a Pulsar batch
        (PulsarMessageId(8, 6, 1), 110),  # another ledger: does not follow
        (PulsarMessageId(8, 6, 2), 111),
    ]
    return [AppendResult(i, t) for i, t in ids]


def test_runs_expand_to_the_per_message_answer_for_pulsar_ids() -> None:
    results = _pulsar_results()
    frame = compact_batch_response(results)
    assert not frame.results
    assert [r.count for r in frame.runs] == [1, 3, 2, 2, 1, 2]
    assert expand_runs(frame.runs, [None] * len(results)) == _per_message(results)


def test_runs_expand_to_the_per_message_answer_for_memory_ids() -> None:
    results = [AppendResult(MemoryMessageId(5), 50)]
    results += [AppendResult(MemoryMessageId(6, i), 51 + i) for i in range(300)]
    results += [AppendResult(MemoryMessageId(7, 0), 351), AppendResult(MemoryMessageId(8), 352)]
    frame = compact_batch_response(results)
    assert [r.count for r in frame.runs] == [1, 300, 1, 1]
    assert expand_runs(frame.runs, [None] * len(results)) == _per_message(results)


def test_numbers_follow_the_messages_through_the_runs() -> None:
    results = _pulsar_results()
    numbers: list[tuple[int, int] | None] = [(9, 40 + i) for i in range(len(results))]
    acked = batch_acks(compact_batch_response(results), "the batch", numbers)
    assert [(a.producer_id, a.sequence) for a in acked] == numbers
    assert [(a.message_id, a.message_id_text, a.time_tick) for a in acked] == [
        (a.message_id, a.message_id_text, a.time_tick) for a in _per_message(results)
    ]


def test_runs_that_do_not_cover_the_batch_are_refused() -> None:
    frame = compact_batch_response(_pulsar_results())
    with pytest.raises(DecodeError, match="runs of 11 messages for 12"):
        batch_acks(frame, "the batch", [None] * 12)
    bad = pb.ProduceBatchResponse(
        runs=[pb.PackRun(first_message_id=b"ab", first_message_id_text="x", count=3)]
    )
    with pytest.raises(DecodeError, match="cannot be expanded"):
        batch_acks(bad, "the batch", [None] * 3)


@pytest.fixture
async def node() -> AsyncIterator[tuple[NodeClient, pb_grpc.StreamingNodeStub]]:
    """A node over the in-process backend with the channel assigned: its client, and a
    stub that sends requests as they are built."""
    async with (
        memory_node(1, MemoryLogStore(), CounterSource()) as (address, _),
        NodeClient(address, tracing=False) as client,
        grpc.aio.insecure_channel(address) as raw,
    ):
        await client.assign(CHANNEL)
        yield client, pb_grpc.StreamingNodeStub(raw)


async def test_both_forms_from_the_node_agree_with_the_log(
    node: tuple[NodeClient, pb_grpc.StreamingNodeStub],
) -> None:
    """The same node answers a compact batch in runs and a plain one per message; each
    form's ids and ticks are the ones a reader gets back from the log."""
    client, stub = node
    answers: list[Acked] = []
    for compact in (True, False, True):
        request = pb.ProduceBatchRequest(pchannel=CHANNEL, compact=compact)
        request.messages.extend(
            [pb.Message(type="t", payload=b"%d-%03d" % (compact, i)) for i in range(200)]
        )
        reply = await stub.ProduceBatch(request)
        if compact:
            assert not reply.results and 1 <= len(reply.runs) < 10
        else:
            assert not reply.runs and len(reply.results) == 200
        answers += batch_acks(reply, "the batch", [None] * 200)
    answers += await client.produce_batch(CHANNEL, [b"c%d" % i for i in range(50)])
    read = client.consume(CHANNEL, policy("all"), limit=len(answers), timeout=5, appended_only=True)
    log = [(m.message_id, m.message_id_text, m.time_tick) async for m in read]
    assert log == [(a.message_id, a.message_id_text, a.time_tick) for a in answers]


async def test_a_batch_with_a_failed_message_is_answered_per_message(
    node: tuple[NodeClient, pb_grpc.StreamingNodeStub],
) -> None:
    """An independent batch with an invalid message asks for runs and gets results:
    its error is in band, the others are acknowledged."""
    _, stub = node
    request = pb.ProduceBatchRequest(pchannel=CHANNEL, compact=True, independent=True)
    request.messages.extend(
        [
            pb.Message(type="t", payload=b"ok-0"),
            pb.Message(type="é" * 40_000, payload=b"bad"),  # a type over 65,535 bytes
            pb.Message(type="t", payload=b"ok-2"),
        ]
    )
    reply = await stub.ProduceBatch(request)
    assert not reply.runs
    assert [r.HasField("error") for r in reply.results] == [False, True, False]
    assert reply.results[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
