"""What a node's answers become on the client: acknowledgements, messages read, the
error of a batch that landed in part.

Every call of :class:`~streamwal.node.client.NodeClient` and
:class:`~streamwal.node.client.AppendStream` turns its replies into these; the typed
errors of failed calls are :mod:`streamwal.node.client_errors`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from streamwal.errors import DecodeError, StreamwalError, WriteOutcome
from streamwal.node.outcome import in_band_error, write_outcome
from streamwal.node.proto import streaming_pb2 as pb

__all__ = [
    "Acked",
    "BatchProduceError",
    "Consumed",
    "acked_of",
    "answered",
    "batch_acks",
    "consumed_from",
    "expand_runs",
    "frame_answers",
    "grpc_code_of",
    "number_at",
    "numbers_of",
]

#: the trailing index of a message id inside an entry (PackRun in streaming.proto)
_INDEX = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class Acked:
    """An acknowledged append: what a client records to check the log later."""

    message_id: bytes
    message_id_text: str
    time_tick: int
    producer_id: int | None = None
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class Consumed:
    """A message a reader got; built by :func:`consumed_from`, one per message read."""

    message_id: bytes
    message_id_text: str
    time_tick: int
    type: str
    payload: bytes
    vchannel: str
    properties: dict[str, str]
    source_node_id: int
    producer_id: int | None = None
    sequence: int | None = None
    txn_id: int | None = None
    #: the WAL wrote it (a time tick, a transaction marker), not a caller
    wal_record: bool = False
    #: the term of the owner that wrote it (0: before terms, or log format v1)
    term: int = 0


class BatchProduceError(StreamwalError):
    """Part of a batch failed: ``results`` holds, message by message in batch order,
    the :class:`Acked` of each that is in the log and the typed error (with its write
    outcome) of each that failed. ``outcome`` is unknown if any failed one's is."""

    def __init__(self, results: list[Acked | grpc.aio.AioRpcError]) -> None:
        self.results = results
        self.failed = {i: r for i, r in enumerate(results) if not isinstance(r, Acked)}
        self.outcome = (
            WriteOutcome.UNKNOWN
            if any(write_outcome(e) is WriteOutcome.UNKNOWN for e in self.failed.values())
            else WriteOutcome.NOT_WRITTEN
        )
        first = min(self.failed)
        super().__init__(
            f"{len(results) - len(self.failed)} of {len(results)} messages landed; "
            f"message {first} failed first: {self.failed[first].details()}"
        )


def acked_of(r: pb.ProduceResponse, numbers: tuple[int, int] | None) -> Acked:
    return _acked(r.message_id, r.message_id_text, r.time_tick, numbers)


def number_at(numbers: list[tuple[int, int] | None], index: int) -> tuple[int, int] | None:
    return numbers[index] if index < len(numbers) else None


def numbers_of(request: pb.ProduceBatchRequest) -> list[tuple[int, int] | None]:
    if not request.HasField("producer_id"):
        return [None] * len(request.messages)
    first = request.first_sequence
    return [(request.producer_id, first + i) for i in range(len(request.messages))]


def expand_runs(runs: Iterable[pb.PackRun], numbers: list[tuple[int, int] | None]) -> list[Acked]:
    """The per-message acknowledgements a compact answer stands for (``PackRun`` in
    ``streaming.proto``: message k of a run has the first's id with its trailing
    index plus k, and its time tick plus k). :class:`~streamwal.errors.DecodeError`
    for a run that cannot be expanded (its id has no index to count on from)."""
    acked: list[Acked] = []
    for run in runs:
        first, text, tick, count = (
            run.first_message_id,
            run.first_message_id_text,
            run.first_time_tick,
            run.count,
        )
        if count == 1:
            acked.append(_acked(first, text, tick, number_at(numbers, len(acked))))
            continue
        colon = text.rfind(":")
        if count < 1 or len(first) < _INDEX.size or colon < 0:
            raise DecodeError(f"a run of {count} from {text!r}: cannot be expanded")
        head, text_head = first[: -_INDEX.size], text[: colon + 1]
        (index,) = _INDEX.unpack_from(first, len(first) - _INDEX.size)
        pack = _INDEX.pack
        for k in range(count):
            acked.append(
                _acked(
                    head + pack(index + k),
                    f"{text_head}{index + k}",
                    tick + k,
                    number_at(numbers, len(acked)),
                )
            )
    return acked


def _acked(message_id: bytes, text: str, time_tick: int, numbers: tuple[int, int] | None) -> Acked:
    """Built through the slots, as :func:`consumed_from` builds a message read: the
    frozen dataclass's ``__init__`` costs a run's expansion more than the rest of it."""
    acked = _new_acked(Acked)
    _set_acked_id(acked, message_id)
    _set_acked_text(acked, text)
    _set_acked_tick(acked, time_tick)
    producer_id, sequence = (None, None) if numbers is None else numbers
    _set_acked_producer(acked, producer_id)
    _set_acked_sequence(acked, sequence)
    return acked


def frame_answers(
    response: pb.ProduceBatchResponse, numbers: list[tuple[int, int] | None]
) -> Sequence[Acked | pb.ProduceResponse]:
    """One answer per append of a frame of separate appends (``independent``), in its
    order: the runs expanded when every append landed (``compact``), else each one's
    result, an error or where it landed. :class:`~streamwal.errors.DecodeError` for
    answers that do not fit the frame."""
    answers: Sequence[Acked | pb.ProduceResponse] = (
        expand_runs(response.runs, numbers) if response.runs else response.results
    )
    if len(answers) != len(numbers):
        raise DecodeError(f"a frame of {len(numbers)} appends answered with {len(answers)} results")
    return answers


def answered(
    r: Acked | pb.ProduceResponse, numbers: tuple[int, int] | None
) -> Acked | pb.AppendError:
    """One append's answer from a frame (:func:`frame_answers`): where it landed, or its
    in-band error for the caller to raise (:func:`~streamwal.node.outcome.in_band_error`,
    named as the caller names the append)."""
    if isinstance(r, Acked):
        return r
    if r.HasField("error"):
        return r.error
    return acked_of(r, numbers)


def batch_acks(
    response: pb.ProduceBatchResponse, which: str, numbers: list[tuple[int, int] | None]
) -> list[Acked]:
    """A batch's acknowledgements, from either answer form (runs when every message
    landed and the request asked for them, else one result per message); raises
    :class:`BatchProduceError` when a message failed."""
    if response.runs:
        acked = expand_runs(response.runs, numbers)
        if len(acked) != len(numbers):
            raise DecodeError(f"{which}: runs of {len(acked)} messages for {len(numbers)}")
        return acked
    results: list[Acked | grpc.aio.AioRpcError] = []
    for i, r in enumerate(response.results):
        if r.HasField("error"):
            error = in_band_error(r.error, f"message {i} of {which}")
            if i < len(numbers) and numbers[i] is not None:
                error.producer_id, error.sequence = numbers[i]  # type: ignore[misc]
            results.append(error)
        else:
            results.append(acked_of(r, number_at(numbers, i)))
    acked = [r for r in results if isinstance(r, Acked)]
    if len(acked) < len(results):
        raise BatchProduceError(results)
    return acked


def grpc_code_of(exc: BaseException) -> grpc.StatusCode | None:
    """The gRPC status code a failed call raised, ``None`` for any other exception."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code()
    return None


def _slot_setter(name: str, kind: type = Consumed) -> Callable[[Any, Any], None]:
    setter: Callable[[Any, Any], None] = kind.__dict__[name].__set__
    return setter


_new_acked = object.__new__
_set_acked_id = _slot_setter("message_id", Acked)
_set_acked_text = _slot_setter("message_id_text", Acked)
_set_acked_tick = _slot_setter("time_tick", Acked)
_set_acked_producer = _slot_setter("producer_id", Acked)
_set_acked_sequence = _slot_setter("sequence", Acked)


_new_consumed = object.__new__
_set_message_id = _slot_setter("message_id")
_set_message_id_text = _slot_setter("message_id_text")
_set_time_tick = _slot_setter("time_tick")
_set_type = _slot_setter("type")
_set_payload = _slot_setter("payload")
_set_vchannel = _slot_setter("vchannel")
_set_properties = _slot_setter("properties")
_set_source_node_id = _slot_setter("source_node_id")
_set_producer_id = _slot_setter("producer_id")
_set_sequence = _slot_setter("sequence")
_set_txn_id = _slot_setter("txn_id")
_set_wal_record = _slot_setter("wal_record")
_set_term = _slot_setter("term")


def consumed_from(m: pb.ConsumedMessage) -> Consumed:
    """Built through the slots: the frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``, which cost a reader more than the rest of the
    conversion (a message read is never validated here: the node built it)."""
    consumed = _new_consumed(Consumed)
    _set_message_id(consumed, m.message_id)
    _set_message_id_text(consumed, m.message_id_text)
    _set_time_tick(consumed, m.time_tick)
    _set_type(consumed, m.type)
    _set_payload(consumed, m.payload)
    _set_vchannel(consumed, m.vchannel)
    properties = m.properties
    _set_properties(consumed, dict(properties) if properties else {})
    _set_source_node_id(consumed, m.source_node_id)
    has = m.HasField
    _set_producer_id(consumed, m.producer_id if has("producer_id") else None)
    _set_sequence(consumed, m.sequence if has("sequence") else None)
    _set_txn_id(consumed, m.txn_id if has("txn_id") else None)
    _set_wal_record(consumed, m.wal_record)
    _set_term(consumed, m.term)
    return consumed
