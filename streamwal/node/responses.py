"""The protobuf side of the node's service, with no call in it: messages parsed out of
requests, answers built from what the WAL returned.

:mod:`streamwal.node.servicer` calls these; they raise :class:`InvalidInputError` for
a request that cannot be served and nothing else. Errors become statuses (and in-band
answers) in the servicer, which maps them (:func:`~streamwal.node.servicer.grpc_status_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from streamwal.errors import InvalidInputError, StreamwalError
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.wal.backend import BackendOpener, DeliveryPolicy
from streamwal.wal.interceptors import AppendResult
from streamwal.wal.message import MutableMessage
from streamwal.wal.message.message import built_mutable
from streamwal.wal.message_id import MessageId
from streamwal.wal.retention_contract import RetentionState, time_tick_lag_ms

__all__ = [
    "MAX_BATCH_MESSAGES",
    "compact_batch_response",
    "delivery_policy",
    "frame_bounds",
    "independent_messages",
    "message_id_of",
    "message_of",
    "messages_of",
    "parse_message_type",
    "produce_response",
    "retention_response",
    "truncate_response",
]

#: the most messages one ProduceBatchRequest may carry
MAX_BATCH_MESSAGES: Final = 10_000
_FRAME_MESSAGES = (256, 4096)  # ConsumeBatch: default and cap
_FRAME_BYTES = (1 << 20, 4 << 20)

# ---- requests in ----------------------------------------------------------------------


def parse_message_type(name: str) -> str:
    """A caller's type as the WAL carries it: the string itself, whatever it is (the
    WAL's own records are told apart by a flag, not by a name)."""
    return name


# a message's own empty default, which it takes without checking; copying an empty
# protobuf map instead costs an ABC walk per message
_NO_PROPERTIES = MutableMessage("").properties


def message_of(
    m: pb.Message,
    *,
    producer_id: int | None = None,
    sequence: int | None = None,
    txn_id: int | None = None,
) -> MutableMessage:
    """The message a client sent, its type and properties verbatim;
    :class:`InvalidInputError` for a producer id without a sequence, or the other way
    round."""
    return built_mutable(
        m.type,
        bytes(m.payload),
        m.vchannel,
        dict(m.properties) if m.properties else _NO_PROPERTIES,
        producer_id,
        sequence,
        txn_id,
    )


def messages_of(request: pb.ProduceBatchRequest) -> list[MutableMessage]:
    """The messages of a batch, numbered from ``first_sequence`` when it has a producer;
    one invalid message refuses the batch (naming it)."""
    msgs: list[MutableMessage] = []
    for index, m in enumerate(independent_messages(request)):
        if isinstance(m, InvalidInputError):
            raise InvalidInputError(f"message {index} of the batch: {m}") from m
        msgs.append(m)
    return msgs


def independent_messages(
    request: pb.ProduceBatchRequest,
) -> list[MutableMessage | InvalidInputError]:
    """The messages of a frame of separate appends, each numbered as in a batch; an
    invalid one is its error, in its place (a frame refused whole raises, as a batch)."""
    if len(request.messages) > MAX_BATCH_MESSAGES:
        raise InvalidInputError(
            f"a batch of {len(request.messages)} messages; at most {MAX_BATCH_MESSAGES}"
        )
    numbered = request.HasField("producer_id")
    if numbered != request.HasField("first_sequence"):
        raise InvalidInputError("a batch's producer_id and first_sequence go together")
    out: list[MutableMessage | InvalidInputError] = []
    for m, (producer_id, sequence) in zip(
        request.messages, _numbers(request, numbered), strict=True
    ):
        try:
            out.append(message_of(m, producer_id=producer_id, sequence=sequence))
        except InvalidInputError as exc:
            out.append(exc)
    return out


def _numbers(
    request: pb.ProduceBatchRequest, numbered: bool
) -> list[tuple[int | None, int | None]]:
    """Each message's producer id and sequence: the batch's run from
    ``first_sequence``, or each message's own (``ids``), or none."""
    count = len(request.messages)
    if not request.ids:
        if not numbered:
            return [(None, None)] * count
        first = request.first_sequence
        return [(request.producer_id, first + i) for i in range(count)]
    if not request.independent or numbered:
        raise InvalidInputError("a batch's ids go with independent and without producer_id")
    if len(request.ids) != count:
        raise InvalidInputError(f"{len(request.ids)} ids for {count} messages: one per message")
    return [
        (
            ids.producer_id if ids.HasField("producer_id") else None,
            ids.sequence if ids.HasField("sequence") else None,
        )
        for ids in request.ids
    ]


def message_id_of(opener: BackendOpener, raw: bytes) -> MessageId:
    try:
        return opener.message_id_from_bytes(bytes(raw))
    except StreamwalError as exc:
        raise InvalidInputError(f"invalid message id: {exc}") from exc


def delivery_policy(request: pb.ConsumeRequest, opener: BackendOpener) -> DeliveryPolicy:
    """Where a ``Consume`` or ``ConsumeBatch`` starts (everything when unset)."""
    which = request.policy.WhichOneof("policy") if request.HasField("policy") else "all"
    if which in (None, "all"):
        return DeliveryPolicy.all()
    if which == "latest":
        return DeliveryPolicy.latest()
    if which == "start_from_time_tick":
        return DeliveryPolicy.start_from_time_tick(request.policy.start_from_time_tick)
    if which == "after_checkpoint":
        return DeliveryPolicy.after_checkpoint(request.policy.after_checkpoint)
    raw = getattr(request.policy, which)
    try:
        message_id = opener.message_id_from_bytes(bytes(raw))
    except StreamwalError as exc:
        raise InvalidInputError(f"invalid message id in {which}: {exc}") from exc
    if which == "start_from":
        return DeliveryPolicy.start_from(message_id)
    return DeliveryPolicy.start_after(message_id)


def frame_bounds(request: pb.ConsumeRequest) -> tuple[int, int]:
    """The most messages and about the most payload bytes one ``ConsumeBatch`` frame
    carries: what the client asked, capped; a default when it asked nothing."""
    max_messages = _bound(request.max_batch_messages, _FRAME_MESSAGES)
    return max_messages, _bound(request.max_batch_bytes, _FRAME_BYTES)


def _bound(asked: int, default_and_cap: tuple[int, int]) -> int:
    default, cap = default_and_cap
    return min(asked, cap) if asked > 0 else default


# ---- answers out ----------------------------------------------------------------------


def produce_response(
    result: AppendResult, answer: pb.ProduceResponse | None = None
) -> pb.ProduceResponse:
    """The receipt of an append, filled into ``answer`` when given (a batch's frame adds
    its answers in place: copying each into it costs half as much again)."""
    if answer is None:
        answer = pb.ProduceResponse()
    message_id = result.message_id
    answer.message_id = message_id.to_bytes()
    answer.message_id_text = str(message_id)
    answer.time_tick = result.time_tick
    return answer


def compact_batch_response(results: Sequence[AppendResult]) -> pb.ProduceBatchResponse:
    """A batch that landed whole, answered in runs (``PackRun``): one id, its text and
    a time tick per run of messages that follow each other in one entry with
    consecutive time ticks, instead of a ``ProduceResponse`` per message. Runs are cut
    wherever an id or a tick does not follow, so the client's expansion is exact
    whatever the packs and the allocator did."""
    frame = pb.ProduceBatchResponse()
    add = frame.runs.add
    run: pb.PackRun | None = None
    count = 0
    previous: MessageId | None = None
    previous_tick = 0
    for message_id, time_tick in results:
        if (
            previous is not None
            and time_tick == previous_tick + 1
            and message_id.follows_in_entry(previous)
        ):
            count += 1
        else:
            if run is not None:
                run.count = count
            run = add(
                first_message_id=message_id.to_bytes(),
                first_message_id_text=str(message_id),
                first_time_tick=time_tick,
            )
            count = 1
        previous, previous_tick = message_id, time_tick
    if run is not None:
        run.count = count
    return frame


def retention_response(state: RetentionState, latest: int) -> pb.GetRetentionResponse:
    """``state`` as a client reads it; ``latest`` is the channel's time tick, which each
    consumer's lag is measured from."""
    point = state.truncated_before
    return pb.GetRetentionResponse(
        truncated_before=point.to_bytes() if point is not None else b"",
        truncated_before_text=str(point) if point is not None else "",
        storage_bytes=-1 if state.storage_bytes is None else state.storage_bytes,
        consumers=[
            pb.ConsumerRetention(
                consumer=c.checkpoint.consumer,
                message_id=c.checkpoint.message_id.to_bytes(),
                message_id_text=str(c.checkpoint.message_id),
                time_tick=c.checkpoint.time_tick,
                backlog_messages=-1 if c.backlog_messages is None else c.backlog_messages,
                backlog_bytes=-1 if c.backlog_bytes is None else c.backlog_bytes,
                time_tick_lag_ms=time_tick_lag_ms(latest, c.checkpoint.time_tick),
            )
            for c in state.consumers
        ],
        latest_time_tick=latest,
    )


def truncate_response(
    moved: MessageId | None, point: MessageId | None, through: MessageId | None = None
) -> pb.TruncateResponse:
    """``moved``: the new truncation point, if this call moved it; ``point``: where the
    log is truncated now; ``through``: the last message a truncate to an id dropped."""
    return pb.TruncateResponse(
        moved=moved is not None,
        truncated_before=point.to_bytes() if point is not None else b"",
        truncated_before_text=str(point) if point is not None else "",
        truncated_through=through.to_bytes() if through is not None else b"",
        truncated_through_text=str(through) if through is not None else "",
    )
