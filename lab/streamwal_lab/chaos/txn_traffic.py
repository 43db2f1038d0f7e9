"""A client that writes transactions through faults, and the check of what a reader
of the channel then delivers.

One worker loops: begin a transaction on the node it believes owns the channel,
append ``size`` unique payloads into it (idempotent appends), commit. Any error ends
the transaction there: it is rolled back if the node still can, and the worker moves
to the next node and begins a new one. A transaction whose commit was acknowledged
is *committed*; one whose commit failed with an unknown outcome is *unknown* (it may
have committed); the others are *abandoned*.

:func:`check_delivery` reads the whole vchannel through a node and checks what it
delivers: every committed transaction whole, together and once; an unknown one whole
or not at all; nothing of an abandoned one. It reads twice, with ``Consume`` (one
message per frame) and ``ConsumeBatch`` (what the scanner has ready, many per frame, by
another path through the scanner): both must deliver the same messages in the same
order.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from streamwal.node.client import Consumed, NodeClient, policy
from streamwal.node.idempotence import ProducerIdentity
from streamwal.node.outcome import write_outcome
from streamwal.node.proto import streaming_pb2 as pb

__all__ = ["DeliveryCheck", "TxnTraffic", "check_delivery"]

VCHANNEL = "txn"
_OTHER_VCHANNEL = "not-txn"


class TxnTraffic:
    """Transactions of ``size`` messages on ``channel``'s vchannel ``txn``."""

    def __init__(
        self,
        channel: str,
        addresses: Sequence[str],
        *,
        rng: random.Random,
        size: int = 4,
        call_timeout: float = 10.0,
        keepalive_s: float = 5.0,
    ) -> None:
        self.channel = channel
        self.addresses = list(addresses)
        self.committed: list[list[bytes]] = []
        self.unknown: list[list[bytes]] = []
        self.abandoned: list[list[bytes]] = []
        self.codes: Counter[str] = Counter()
        self._rng = rng
        self._size = size
        self._call_timeout = call_timeout
        self._keepalive_s = keepalive_s
        self._target = 0
        self._identity = ProducerIdentity(rng.getrandbits(63))
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def prefer(self, address: str) -> None:
        self._target = self.addresses.index(address)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="txn-traffic")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, self._call_timeout * (self._size + 3))
            except TimeoutError:
                pass
            self._task = None

    async def _run(self) -> None:
        clients = {
            a: NodeClient(a, timeout=self._call_timeout, tracing=False, producer=self._identity)
            for a in self.addresses
        }
        number = 0
        try:
            while not self._stop.is_set():
                client = clients[self.addresses[self._target % len(self.addresses)]]
                number += 1
                payloads = [f"{self.channel}/txn{number}/{i}".encode() for i in range(self._size)]
                if not await self._one(client, payloads):
                    self._target += 1
                    await asyncio.sleep(self._rng.uniform(0.02, 0.1))
        finally:
            for client in clients.values():
                await client.close()

    async def _one(self, client: NodeClient, payloads: list[bytes]) -> bool:
        """One transaction; whether it committed."""
        txn: int | None = None
        try:
            txn = await client.begin_txn(self.channel, VCHANNEL, self._keepalive_s)
            for payload in payloads:
                await client.produce(self.channel, payload, vchannel=VCHANNEL, txn_id=txn)
        except grpc.aio.AioRpcError as exc:
            self.codes[exc.code().name] += 1
            self.abandoned.append(payloads)
            if txn is not None:
                await self._roll_back(client, txn)
            return False
        try:
            await client.commit_txn(self.channel, txn)
        except grpc.aio.AioRpcError as exc:
            self.codes[exc.code().name] += 1
            known = exc.code() == grpc.StatusCode.ABORTED or (
                write_outcome(exc).value == "not-written"
            )
            (self.abandoned if known else self.unknown).append(payloads)
            return False
        self.committed.append(payloads)
        return True

    async def _roll_back(self, client: NodeClient, txn: int) -> None:
        try:
            await client.rollback_txn(self.channel, txn)
        except grpc.aio.AioRpcError as exc:
            self.codes[exc.code().name] += 1


@dataclass
class DeliveryCheck:
    problems: list[str] = field(default_factory=list)
    delivered_ids: list[bytes] = field(default_factory=list)
    committed_delivered: int = 0
    unknown_delivered: int = 0


async def check_delivery(address: str, traffic: TxnTraffic, timeout: float = 60.0) -> DeliveryCheck:
    """Read the vchannel from the start through the node at ``address`` (the owner)
    up to a sentinel appended now; check it against ``traffic``'s records. Then
    :func:`_check_tail` on the same node."""
    check = DeliveryCheck()
    sentinel = f"{traffic.channel}/txn-sentinel".encode()
    async with NodeClient(address, timeout=timeout, tracing=False) as client:
        await client.produce(traffic.channel, sentinel, vchannel=VCHANNEL)
        async with asyncio.timeout(timeout):
            delivered = await _read(client, traffic.channel, policy("all"), sentinel, False)
            await _check_tail(client, traffic.channel, check)
    one_by_one = [m.message_id for m in delivered]
    check.delivered_ids = one_by_one
    data = [m.payload for m in delivered if not m.wal_record and m.payload != sentinel]
    position = {payload: i for i, payload in enumerate(data)}
    counts = Counter(data)
    dup = [p for p, n in counts.items() if n > 1]
    if dup:
        check.problems.append(f"{len(dup)} payloads delivered more than once, e.g. {dup[0]!r}")
    for payloads in traffic.committed:
        if not _whole(payloads, position, check, "committed", required=True):
            continue
        check.committed_delivered += 1
    for payloads in traffic.unknown:
        if _whole(payloads, position, check, "unknown", required=False):
            check.unknown_delivered += 1
    for payloads in traffic.abandoned:
        shown = [p for p in payloads if p in position]
        if shown:
            check.problems.append(f"abandoned transaction delivered: {shown[0]!r}")
    return check


async def _read(
    client: NodeClient, channel: str, delivery: pb.DeliveryPolicy, last: bytes, batched: bool
) -> list[Consumed]:
    """What a reader of the vchannel gets under ``delivery`` up to the payload ``last``,
    through ``ConsumeBatch`` (``batched``) or ``Consume``."""
    delivered: list[Consumed] = []
    if batched:
        async for frame in client.consume_batches(channel, delivery, vchannel=VCHANNEL):
            for m in frame:
                delivered.append(m)
                if m.payload == last:
                    return delivered
    else:
        async for m in client.consume(channel, delivery, vchannel=VCHANNEL):
            delivered.append(m)
            if m.payload == last:
                return delivered
    raise RuntimeError(f"the read of {channel!r} ended before {last!r}")


async def _check_tail(client: NodeClient, channel: str, check: DeliveryCheck) -> None:
    """Readers at the tail are served from the owner's write-ahead buffer, by another
    path through the scanner than a catch-up read (``ConsumeBatch`` takes most messages
    inline there). Written now, after a marker: messages of another vchannel, a
    committed and a rolled-back transaction; read from the marker's time tick through
    ``Consume`` and ``ConsumeBatch``, both must deliver the same messages in the same
    order, nothing of the other vchannel or the rollback, and the commit whole."""
    marker = await client.produce(channel, b"tail-marker", vchannel=VCHANNEL)
    for n in range(3):
        await client.produce(channel, b"tail-elsewhere-%d" % n, vchannel=_OTHER_VCHANNEL)
    kept = await client.begin_txn(channel, VCHANNEL)
    dropped = await client.begin_txn(channel, VCHANNEL)
    for n in range(2):
        await client.produce(channel, b"tail-kept-%d" % n, vchannel=VCHANNEL, txn_id=kept)
        await client.produce(channel, b"tail-dropped-%d" % n, vchannel=VCHANNEL, txn_id=dropped)
    await client.produce(channel, b"tail-between", vchannel=VCHANNEL)
    await client.commit_txn(channel, kept)
    await client.rollback_txn(channel, dropped)
    await client.produce(channel, b"tail-last", vchannel=VCHANNEL)
    start = policy("start_from_time_tick", time_tick=marker.time_tick)
    one_by_one = await _read(client, channel, start, b"tail-last", False)
    batched = await _read(client, channel, start, b"tail-last", True)
    if [m.message_id for m in batched] != [m.message_id for m in one_by_one]:
        check.problems.append(
            f"at the tail, ConsumeBatch delivered {len(batched)} messages and Consume "
            f"{len(one_by_one)}, not the same"
        )
    data = [m.payload for m in one_by_one if not m.wal_record]
    expected = [b"tail-marker", b"tail-between", b"tail-kept-0", b"tail-kept-1", b"tail-last"]
    if data != expected:
        check.problems.append(f"at the tail, a reader of {VCHANNEL!r} got {data!r}")


def _whole(
    payloads: list[bytes],
    position: dict[bytes, int],
    check: DeliveryCheck,
    kind: str,
    *,
    required: bool,
) -> bool:
    """Whether ``payloads`` were delivered together and in order; a problem if only
    some were, or (``required``) none."""
    found = [position.get(p) for p in payloads]
    if all(i is None for i in found):
        if required:
            check.problems.append(f"{kind} transaction not delivered: {payloads[0]!r}")
        return False
    if any(i is None for i in found):
        check.problems.append(f"{kind} transaction delivered in part: {payloads[0]!r}")
        return False
    first = found[0]
    assert first is not None
    if found != list(range(first, first + len(found))):
        check.problems.append(f"{kind} transaction not delivered together: {payloads[0]!r}")
        return False
    return True
