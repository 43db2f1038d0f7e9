"""The state every call of a node client shares, and how its appends are numbered.

:class:`Numbering` is the base of :class:`~streamwal.node.client.NodeClient` (its
unary calls and its streams are written against it) and what an
:class:`~streamwal.node.client.AppendStream` numbers its appends with.
"""

from __future__ import annotations

from collections.abc import Sequence

from streamwal.errors import StreamwalError
from streamwal.node.client.answers import BatchProduceError
from streamwal.node.client.retries import give_up
from streamwal.node.client_errors import NodeCallError
from streamwal.node.idempotence import ProducerIdentity
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc

__all__ = ["Numbering", "batch_request"]


class Numbering:
    """What a client's calls share, its stub, deadline and producer identity, and the
    numbering of appends by that identity (``producer``; ``None``: not numbered)."""

    producer: ProducerIdentity | None
    _stub: pb_grpc.StreamingNodeStub
    _timeout: float

    async def _reserved(self, pchannel: str) -> tuple[int, int] | None:
        """A streamed append's numbers, reserved as a batch of one
        (:meth:`~streamwal.node.idempotence.ProducerIdentity.reserve`: many streams of
        one identity must not run a window ahead of one another); :meth:`_settle_one`
        once it is answered."""
        producer = self.producer
        if producer is None:
            return None
        return await producer.reserve(pchannel, 1)

    def _settle_one(self, pchannel: str, numbers: tuple[int, int] | None) -> None:
        """What was reserved as (producer id, first number) is answered or failed."""
        if numbers is not None and self.producer is not None:
            self.producer.settle(numbers[0], pchannel, numbers[1])

    def _failed(
        self, pchannel: str, numbers: tuple[int, int] | None, error: NodeCallError
    ) -> NodeCallError:
        """Give a failed numbered append's number back (or renew the identity), and name
        the numbers on its error so the caller can retry it."""
        if numbers is not None and self.producer is not None:
            error.producer_id, error.sequence = numbers
            give_up(self.producer, pchannel, numbers, error)
        return error

    async def _batch_request(
        self, pchannel: str, payloads: Sequence[bytes], type: str, vchannel: str
    ) -> tuple[pb.ProduceBatchRequest, tuple[int, int] | None]:
        """A batch is numbered as one run of sequences, the first message's number
        first: the node deduplicates each message as it would a unary append. Waits
        while the identity's batches in flight would span more than the node's window
        (:meth:`~streamwal.node.idempotence.ProducerIdentity.reserve`); a numbered
        request goes to :meth:`_settle` once answered."""
        request = batch_request(pchannel, payloads, type, vchannel)
        producer = self.producer
        if producer is None or not payloads:
            return request, None
        producer_id, first = await producer.reserve(pchannel, len(payloads))
        request.producer_id = producer_id
        request.first_sequence = first
        return request, (producer_id, first + len(payloads) - 1)

    def _settle(
        self, pchannel: str, request: pb.ProduceBatchRequest, last: tuple[int, int] | None
    ) -> None:
        """The batch :meth:`_batch_request` numbered is answered or failed."""
        self._settle_one(pchannel, None if last is None else (last[0], request.first_sequence))

    def _batch_failed(
        self, pchannel: str, last: tuple[int, int] | None, error: StreamwalError
    ) -> None:
        """A batch that did not land whole: its numbers are handed back only if the
        whole batch is known not written and was the last numbered."""
        if last is None or self.producer is None or last[0] != self.producer.producer_id:
            return
        if isinstance(error, BatchProduceError):
            self.producer.renew()  # part of it is in the log
        else:
            self.producer.give_up(last[0], pchannel, last[1], error.outcome)


def batch_request(
    pchannel: str, payloads: Sequence[bytes], type: str, vchannel: str
) -> pb.ProduceBatchRequest:
    """A batch asking for the compact answer (runs; :func:`~.answers.batch_acks`
    reads both forms): one ``PackRun`` per pack instead of a ``ProduceResponse`` per
    message saves the node and the client most of a batch's answer."""
    request = pb.ProduceBatchRequest(pchannel=pchannel, compact=True)
    add = request.messages.add
    for payload in payloads:  # field by field: keywords cost about half as much again
        message = add()
        message.type = type
        message.payload = payload
        if vchannel:
            message.vchannel = vchannel
    return request
