"""A numbered batch's sequence numbers stay inside the 64 bits they are kept in.

The wire holds the first number as a uint64; the node numbers the rest ``first + i``.
A batch that would number past 2**64 - 1 is refused whole: a message numbered there
would be written, acknowledged, and then be undecodable by every reader of the log.
"""

from __future__ import annotations

import pytest

from streamwal.errors import InvalidInputError
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.responses import messages_of

_LAST = 2**64 - 1


def _batch(first: int, count: int) -> pb.ProduceBatchRequest:
    return pb.ProduceBatchRequest(
        pchannel="c",
        messages=[pb.Message(type="insert", payload=b"%d" % i) for i in range(count)],
        producer_id=7,
        first_sequence=first,
    )


def test_a_batch_may_end_on_the_last_sequence_number() -> None:
    msgs = messages_of(_batch(_LAST - 1, 2))
    assert [m.sequence for m in msgs] == [_LAST - 1, _LAST]


def test_a_batch_numbered_past_the_last_sequence_number_is_refused() -> None:
    with pytest.raises(
        InvalidInputError, match=r"sequence number must be an int in \[0, 2\*\*64\)"
    ):
        messages_of(_batch(_LAST, 2))
