"""Clients that produce to a channel through faults and record what was acknowledged.

Each worker appends unique payloads one at a time to the node it believes owns the
channel; on an error it moves to the next node (a fenced or unknown channel, an
unreachable node) after a short pause, and never retries a payload: a failed append
may still have been persisted, and the checker requires every acknowledged payload
to be in the log exactly once. Successful answers become :class:`Ack` records, failed
ones :class:`Failure` records with the outcome the answer gave (not written, or
unknown), which the checker compares with the log. Status codes a fault explains
(NOT_FOUND, FAILED_PRECONDITION, UNAVAILABLE, UNKNOWN for an outcome the node cannot
tell, DEADLINE_EXCEEDED) are counted; any other code is kept as unexpected.

With ``idempotent``, each worker is an idempotent producer (a producer id, a sequence
number per append) and does retry: a failed append is sent again, same payload and
same numbers, to the next node, until it is acknowledged (or ``retry_limit`` tries,
then it is recorded failed, outcome unknown). The node answers a retry of an append
it already has with the first result, so every acknowledged payload must still be in
the log exactly once.

With ``batch`` (a range of sizes), each worker sends ``ProduceBatch`` calls of a
random size in that range instead, never retried either: every message gets the
outcome its own result gave (acknowledged, or failed with its outcome), or, when the
call failed whole, the call's. Each batch's payloads are kept in order
(:attr:`Traffic.batches`) for the checker's ``batch-split`` rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Callable, Sequence

import grpc

from streamwal.node.outcome import in_band_error, write_outcome
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.verify.acks import Ack, Failure, digest
from streamwal_lab.chaos.auth import chaos_channel

__all__ = ["CHANNEL_OPTIONS", "EXPECTED_CODES", "Traffic", "wait_for_count"]

CHANNEL_OPTIONS = [
    # a connection of its own, retried quickly: a restarted node is found again at once
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

EXPECTED_CODES = frozenset(
    {
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNKNOWN,
    }
)


class Traffic:
    """``workers`` producers of ``channel`` over the nodes at ``addresses``.

    :meth:`start` launches them; :meth:`stop` asks them to finish their current append
    and waits (bounded by the call timeout), then closes the clients. ``max_messages``
    bounds the total number of appends attempted. ``tag`` sets this traffic's payloads
    apart from another's on the same channel (the checker finds each by its digest).
    """

    def __init__(
        self,
        channel: str,
        addresses: Sequence[str],
        *,
        rng: random.Random,
        workers: int = 2,
        pause: float = 0.005,
        call_timeout: float = 10.0,
        max_messages: int = 200_000,
        idempotent: bool = False,
        retry_limit: int = 100,
        batch: tuple[int, int] | None = None,
        tag: str = "w",
    ) -> None:
        if batch is not None and (idempotent or not 1 <= batch[0] <= batch[1]):
            raise ValueError(f"batch sizes {batch!r}: a range 1 <= low <= high, not idempotent")
        self.channel = channel
        self.addresses = list(addresses)
        self.acks: list[Ack] = []
        self.failures: list[Failure] = []
        self.codes: Counter[str] = Counter()
        self.unexpected: list[str] = []
        self.attempts = 0
        self.retried = 0
        """Idempotent appends acknowledged after at least one failed try."""
        self.batches: list[list[str]] = []
        """Payload digests of each batch sent, in the batch's order."""
        self._idempotent = idempotent
        self._retry_limit = retry_limit
        self._batch = batch
        self._tag = tag
        self.longest_stall = 0.0
        """The longest time in seconds between two acknowledgements (a fault's reach)."""
        self._last_ack_at: float | None = None
        self._rng = rng
        self._workers = workers
        self._pause = pause
        self._call_timeout = call_timeout
        self._max = max_messages
        self._targets = [0] * workers
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, pb_grpc.StreamingNodeStub] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._acked = asyncio.Event()

    def prefer(self, address: str) -> None:
        """Send the next appends of every worker to ``address`` (a new owner)."""
        index = self.addresses.index(address)
        self._targets = [index] * self._workers

    async def start(self) -> None:
        for worker in range(self._workers):
            self._tasks.append(asyncio.create_task(self._run(worker), name=f"traffic-{worker}"))

    async def wait_for_acks(self, more: int, timeout: float) -> bool:
        """Wait until ``more`` new acknowledgements arrived; ``False`` if not in time."""
        return await wait_for_count(lambda: len(self.acks), self._acked, more, timeout)

    def _stub(self, address: str) -> pb_grpc.StreamingNodeStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = chaos_channel(address, options=CHANNEL_OPTIONS)
            self._channels[address] = channel
            stub = self._stubs[address] = pb_grpc.StreamingNodeStub(channel)
        return stub

    async def _run(self, worker: int) -> None:
        if self._batch is not None:
            await self._run_batches(worker, self._batch)
            return
        seq = 0
        failures = 0
        producer_id = self._rng.getrandbits(63)
        tries = 0  # of the idempotent append under way
        request = pb.ProduceRequest()
        while not self._stop.is_set() and self.attempts < self._max:
            address = self.addresses[self._targets[worker] % len(self.addresses)]
            if tries == 0:
                payload = f"{self.channel}/{self._tag}{worker}/{seq}".encode()
                request = pb.ProduceRequest(
                    pchannel=self.channel, message=pb.Message(type="insert", payload=payload)
                )
                if self._idempotent:
                    request.producer_id, request.sequence = producer_id, seq
                seq += 1
            self.attempts += 1
            try:
                acked = await self._stub(address).Produce(request, timeout=self._call_timeout)
            except grpc.aio.AioRpcError as exc:
                self._failed(address, exc.code(), exc.details() or "")
                tries += 1
                if not self._idempotent or tries >= self._retry_limit:
                    outcome = write_outcome(exc).value if tries == 1 else "unknown"
                    self.failures.append(Failure(digest(payload), outcome))
                    tries = 0
                    if self._idempotent:  # a hole in the numbers: start a new producer
                        producer_id, seq = self._rng.getrandbits(63), 0
                self._targets[worker] += 1
                failures += 1
                await asyncio.sleep(min(0.2, 0.01 * failures) * self._rng.uniform(0.5, 1.5))
                continue
            if tries:
                self.retried += 1
            tries = 0
            failures = 0
            self._acknowledged(Ack(acked.message_id, acked.time_tick, digest(payload)))
            if self._pause:
                await asyncio.sleep(self._pause)
        if tries:  # stopped while retrying: it may be in the log
            self.failures.append(Failure(digest(payload), "unknown"))

    def _acknowledged(self, ack: Ack) -> None:
        now = asyncio.get_running_loop().time()
        if self._last_ack_at is not None:
            self.longest_stall = max(self.longest_stall, now - self._last_ack_at)
        self._last_ack_at = now
        self.acks.append(ack)
        self._acked.set()

    def _failed(self, address: str, code: grpc.StatusCode, details: str) -> None:
        self.codes[code.name] += 1
        if code not in EXPECTED_CODES:
            self.unexpected.append(f"{address}: {code.name} {details}")

    async def _run_batches(self, worker: int, sizes: tuple[int, int]) -> None:
        seq = 0
        failures = 0
        while not self._stop.is_set() and self.attempts < self._max:
            address = self.addresses[self._targets[worker] % len(self.addresses)]
            payloads = [
                f"{self.channel}/batch{worker}/{seq + i}".encode()
                for i in range(self._rng.randint(*sizes))
            ]
            seq += len(payloads)
            digests = [digest(p) for p in payloads]
            self.batches.append(digests)
            request = pb.ProduceBatchRequest(
                pchannel=self.channel,
                messages=[pb.Message(type="insert", payload=p) for p in payloads],
            )
            self.attempts += len(payloads)
            try:
                answer = await self._stub(address).ProduceBatch(request, timeout=self._call_timeout)
            except grpc.aio.AioRpcError as exc:
                self._failed(address, exc.code(), exc.details() or "")
                outcome = write_outcome(exc).value
                self.failures.extend(Failure(d, outcome) for d in digests)
                answer = None
            refused = answer is None or len(answer.results) != len(digests)
            if answer is not None:
                if refused:
                    self.unexpected.append(
                        f"{address}: {len(answer.results)} results for {len(digests)} messages"
                    )
                    unanswered = digests[len(answer.results) :]
                    self.failures.extend(Failure(d, "unknown") for d in unanswered)
                for d, result in zip(digests, answer.results, strict=False):
                    if result.HasField("error"):
                        refused = True
                        error = in_band_error(result.error, "a batch's message")
                        self._failed(address, error.code(), error.details() or "")
                        self.failures.append(Failure(d, write_outcome(error).value))
                    else:
                        self._acknowledged(Ack(result.message_id, result.time_tick, d))
            if refused:
                self._targets[worker] += 1
                failures += 1
                await asyncio.sleep(min(0.2, 0.01 * failures) * self._rng.uniform(0.5, 1.5))
                continue
            failures = 0
            if self._pause:
                await asyncio.sleep(self._pause)

    async def stop(self) -> None:
        """Stop the workers (each finishes its append in flight) and close the clients."""
        self._stop.set()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=self._call_timeout + 5)
            for task in pending:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks = []
        channels, self._channels = self._channels, {}
        self._stubs = {}
        for channel in channels.values():
            await channel.close()


async def wait_for_count(
    count: Callable[[], int], grew: asyncio.Event, more: int, timeout: float
) -> bool:
    """Wait until ``count()`` grew by ``more`` (``grew`` is set on each growth);
    ``False`` if not within ``timeout``."""
    target = count() + more
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while count() < target:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        grew.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(grew.wait(), remaining)
    return True
