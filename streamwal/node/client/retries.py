"""When a failed call is tried again, and what a failed append ends with.

An append's outcome is the strongest of all its tries: once any try may have reached
the node, the append is never reported "not written" and its number is never handed
back, whatever the last try said.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from streamwal.backoff import Backoff
from streamwal.errors import WriteOutcome
from streamwal.node.client.answers import grpc_code_of
from streamwal.node.client_errors import NodeCallError, NodeOutcomeUnknownError, node_error
from streamwal.node.idempotence import ProducerIdentity
from streamwal.node.outcome import write_outcome
from streamwal.retry import Retry

__all__ = ["final_error", "give_up", "may_retry", "with_retries"]

_T = TypeVar("_T")

#: the waits between a call's tries (``retries`` bounds them): 50 ms, doubled up to 1 s
_RETRY_BACKOFF = Backoff(initial=0.05, maximum=1.0)

# an idempotent append is retried on these: the node answers a copy it has with the first
_IDEMPOTENT_RETRY = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
)


def give_up(
    producer: ProducerIdentity, pchannel: str, numbers: tuple[int, int], exc: BaseException
) -> None:
    """Hand the number back, or renew the identity: a refused request (INVALID_ARGUMENT,
    such as a sequence gap) says the numbering itself is off, so its number is not
    reused. Nothing, if the identity has left the numbers' producer id behind
    (:meth:`~streamwal.node.idempotence.ProducerIdentity.give_up`)."""
    producer_id, sequence = numbers
    if producer_id != producer.producer_id:
        return
    if grpc_code_of(exc) == grpc.StatusCode.INVALID_ARGUMENT:
        producer.renew()
    else:
        producer.give_up(producer_id, pchannel, sequence, write_outcome(exc))


def final_error(last: grpc.aio.AioRpcError, unknown: grpc.aio.AioRpcError | None) -> NodeCallError:
    """The error an append ends with: its last try's, unless an earlier try's outcome
    was unknown; then the append may be in the log whatever the last try said, and the
    answer is :class:`~streamwal.node.client_errors.NodeOutcomeUnknownError`."""
    if unknown is None or unknown is last or write_outcome(last) is WriteOutcome.UNKNOWN:
        return node_error(last)
    return NodeOutcomeUnknownError(
        last.code(),
        f"{last.details()} (an earlier try reached the node and its answer was lost "
        f"({unknown.code().name}: {unknown.details()}): it may be in the log)",
        WriteOutcome.UNKNOWN,
    )


def may_retry(exc: grpc.aio.AioRpcError, idempotent: bool) -> bool:
    if idempotent:
        return exc.code() in _IDEMPOTENT_RETRY
    code = exc.code()
    return code == grpc.StatusCode.UNAVAILABLE and write_outcome(exc) is WriteOutcome.NOT_WRITTEN


async def with_retries(
    call: Callable[[], Awaitable[_T]],
    budget: int,
    retryable: Callable[[grpc.aio.AioRpcError], bool],
) -> _T:
    """Await ``call()``, trying it again up to ``budget`` more times (backing off) while
    its failure is ``retryable``; the failure it ends with is typed, by
    :func:`final_error`, from the last try's and any earlier unknown outcome."""
    tries = Retry(
        _RETRY_BACKOFF,
        max_attempts=max(budget, 0) + 1,
        retry_if=lambda exc: isinstance(exc, grpc.aio.AioRpcError) and retryable(exc),
    )
    unknown: grpc.aio.AioRpcError | None = None  # a try that may have been written
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as exc:
            if write_outcome(exc) is WriteOutcome.UNKNOWN:
                unknown = exc
            delay = tries.next(exc)
            if delay is None:
                raise final_error(exc, unknown) from exc
            await tries.wait(delay)
