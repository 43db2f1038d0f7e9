"""Writers that go through the real clients, :class:`~streamwal.cluster.ClusterClient` and
:class:`~streamwal.node.client.NodeClient`, and record what each answer told them.

The other chaos traffic drives raw stubs and never retries, so it checks the node;
these check the clients' own retries: an append's answer must be the strongest of
all its tries (a client that judges an append by its last try answers
"not written" for one whose lost-answer try landed, hands its number back, and the
next append is acknowledged at that one's position and never written). Each
writer is one kind of call with one retry budget, down to a single try; every
acknowledgement, every "not written" and every "unknown" is recorded per writer,
with the payload's digest, so the checker can hold each answer to the log and the
scenario can say how many of each kind landed.

Nothing here retries on its own: what a writer records is exactly what its client
answered (the clients retry inside their budgets).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Sequence,
)
from typing import Any, cast

import grpc

from streamwal.cluster.client import ClusterClient, Transaction
from streamwal.errors import (
    StreamwalError,
    TransactionError,
    TransactionExpiredError,
    WriteOutcome,
    outcome_of,
)
from streamwal.node.client import Acked, AppendStream, BatchProduceError, NodeClient
from streamwal.node.client_errors import NodeCallError
from streamwal.node.idempotence import ProducerIdentity
from streamwal.verify.acks import Ack, Failure, TxnOutcome, TxnRecord, digest
from streamwal_lab.chaos.traffic import EXPECTED_CODES, wait_for_count

__all__ = ["ACKNOWLEDGED", "TXN_VCHANNEL", "ClientWriters", "Records", "Route"]

TXN_VCHANNEL = "txn"
ACKNOWLEDGED = "acknowledged"
_EXPIRING_KEEPALIVE_S = 0.3
# a transaction ended (expired, aborted by a fence, not open on the owner any more),
# also as the last try of a commit whose outcome is unknown
_EXPECTED = EXPECTED_CODES | {grpc.StatusCode.ABORTED}
_TOLD = (ACKNOWLEDGED, WriteOutcome.NOT_WRITTEN.value, WriteOutcome.UNKNOWN.value)


class Route:
    """Where NodeClient writers send their appends: the owner's address as the
    coordinator last set it (a NodeClient has no look-up of its own)."""

    def __init__(self, address: str) -> None:
        self.address = address


class Records:
    """What every writer was told, for the checker and the figures."""

    def __init__(self) -> None:
        self.acks: list[Ack] = []
        self.failures: list[Failure] = []
        self.batches: list[list[str]] = []
        self.txns: list[TxnRecord] = []
        self.told: dict[str, dict[str, list[str]]] = {}
        """Writer -> answer (acknowledged, not-written, unknown) -> payload digests."""
        self.codes: Counter[str] = Counter()
        self.unexpected: list[str] = []
        self._acked = asyncio.Event()

    def _of(self, writer: str) -> dict[str, list[str]]:
        return self.told.setdefault(writer, {t: [] for t in _TOLD})

    def acknowledged(self, writer: str, payload: bytes, acked: Acked) -> Ack:
        ack = Ack(acked.message_id, acked.time_tick, digest(payload))
        self.acks.append(ack)
        self._of(writer)[ACKNOWLEDGED].append(ack.digest)
        self._acked.set()
        return ack

    def failed(
        self, writer: str, payload: bytes, exc: BaseException, *, stream: bool = False
    ) -> None:
        self.failed_as(writer, payload, outcome_of(exc))
        self.note(writer, exc, stream=stream)

    def failed_as(self, writer: str, payload: bytes, outcome: WriteOutcome) -> None:
        d = digest(payload)
        self.failures.append(Failure(d, outcome.value))
        self._of(writer)[outcome.value].append(d)

    def note(self, writer: str, exc: BaseException, *, stream: bool = False) -> None:
        """Count the status; keep any a fault does not explain. ``stream``: the call
        was a stream, where grpcio may report a write the cut connection failed as
        INTERNAL in place of the status (grpc/grpc#36066): explained by the fault. The
        client answers such an append unknown once it was handed to the call, not
        written if it never left the client; the checker holds the latter to the log
        (``not-written-persisted``)."""
        if isinstance(exc, NodeCallError):
            code = exc.code()
            self.codes[code.name] += 1
            cut_stream = stream and code == grpc.StatusCode.INTERNAL
            if code not in _EXPECTED and not cut_stream:
                self.unexpected.append(f"{writer}: {exc}")
        elif isinstance(exc, StreamwalError):
            self.codes[type(exc).__name__] += 1
        else:
            self.codes[type(exc).__name__] += 1
            self.unexpected.append(f"{writer}: {type(exc).__name__}: {exc}")

    @property
    def acked_count(self) -> int:
        return len(self.acks)

    async def wait_for_acks(self, more: int, timeout: float) -> bool:
        """Wait until ``more`` new acknowledgements arrived; ``False`` if not in time."""
        return await wait_for_count(lambda: len(self.acks), self._acked, more, timeout)


Writer = Callable[[], Coroutine[Any, Any, None]]
_Producer = ClusterClient | NodeClient


class ClientWriters:
    """The writers of one channel: each a task looping over one kind of call.

    ``cluster`` maps a retry budget (seconds) to a :class:`ClusterClient` of that
    budget; ``node_addresses`` are the addresses NodeClient writers may be routed to
    (``route``). Payloads are unique per writer and number.
    """

    def __init__(
        self,
        channel: str,
        records: Records,
        *,
        rng: random.Random,
        route: Route,
        node_addresses: Sequence[str],
        pause: float = 0.02,
        call_timeout: float = 5.0,
        txn_keepalive_s: float = 2.0,
    ) -> None:
        self.channel = channel
        self.records = records
        self._rng = rng
        self._route = route
        self._node_addresses = list(node_addresses)
        self._pause = pause
        self._call_timeout = call_timeout
        self._keepalive = txn_keepalive_s
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._node_clients: list[NodeClient] = []
        self.txn_sleeps = 0
        """Transactions left idle past their keepalive before the commit, on purpose."""

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self, name: str, writer: Writer) -> None:
        self._tasks.append(asyncio.create_task(writer(), name=name))

    async def stop(self) -> None:
        """Stop every writer after its call in flight (bounded), then close NodeClients."""
        self._stop.set()
        if self._tasks:
            bound = self._call_timeout * 4 + self._keepalive + 5
            _, pending = await asyncio.wait(self._tasks, timeout=bound)
            for task in pending:
                task.cancel()
            results = await asyncio.gather(*self._tasks, return_exceptions=True)
            for result in results:
                if isinstance(result, Exception):
                    self.records.unexpected.append(f"a writer died: {result!r}")
            self._tasks = []
        for client in self._node_clients:  # kept: their counts stay readable
            with contextlib.suppress(Exception):
                await client.close()

    def _payloads(self, writer: str, start: int, count: int) -> list[bytes]:
        return [f"{self.channel}/{writer}/{start + i}".encode() for i in range(count)]

    def _runs(self, name: str, sizes: tuple[int, int]) -> Iterator[list[bytes]]:
        """The payloads of one writer's calls, a random count within ``sizes`` a call,
        numbered on from the call before, until the writers stop."""
        n = 0
        while not self._stop.is_set():
            payloads = self._payloads(name, n, self._rng.randint(*sizes))
            n += len(payloads)
            yield payloads

    async def _rest(self, failed: bool) -> None:
        if failed:
            await asyncio.sleep(self._rng.uniform(0.02, 0.1))
        elif self._pause:
            await asyncio.sleep(self._pause)

    def _unary(self, name: str, client: Callable[[], _Producer]) -> Writer:
        """One append a call, each through ``client()`` (the owner's client, for a
        NodeClient, picked again for every call)."""

        async def run() -> None:
            n = 0
            while not self._stop.is_set():
                (payload,) = self._payloads(name, n, 1)
                n += 1
                try:
                    acked = await client().produce(self.channel, payload)
                except Exception as exc:
                    self.records.failed(name, payload, exc)
                    await self._rest(True)
                    continue
                self.records.acknowledged(name, payload, acked)
                await self._rest(False)

        return run

    def _batches(
        self, name: str, client: Callable[[], _Producer], sizes: tuple[int, int]
    ) -> Writer:
        """Batches of a random size within ``sizes``, each through ``client()``."""

        async def run() -> None:
            for payloads in self._runs(name, sizes):
                call = client().produce_batch(self.channel, payloads)
                await self._rest(await self._batch(name, payloads, call))

        return run

    def node_clients(self, retries: int) -> dict[str, NodeClient]:
        """One NodeClient per address, sharing one producer identity: a writer that
        moves to the new owner keeps its numbering."""
        identity = ProducerIdentity()
        clients = {
            a: NodeClient(
                a, timeout=self._call_timeout, tracing=False, retries=retries, producer=identity
            )
            for a in self._node_addresses
        }
        self._node_clients.extend(clients.values())
        return clients

    # ---- ClusterClient ---------------------------------------------------------------
    def cluster_unary(self, name: str, client: ClusterClient) -> Writer:
        return self._unary(name, lambda: client)

    def cluster_batch(self, name: str, client: ClusterClient, sizes: tuple[int, int]) -> Writer:
        return self._batches(name, lambda: client, sizes)

    def cluster_stream(
        self, name: str, client: ClusterClient, sizes: tuple[int, int], in_flight: int
    ) -> Writer:
        async def run() -> None:
            for payloads in self._runs(name, sizes):
                answered = 0
                pulled = 0

                async def source(run: list[bytes] = payloads) -> AsyncIterator[bytes]:
                    # counts what the client took: the rest was never sent
                    nonlocal pulled
                    for payload in run:
                        pulled += 1
                        yield payload

                failed = False
                stream = cast(
                    AsyncGenerator[Acked, None],
                    client.produce_stream(self.channel, source(), in_flight=in_flight),
                )
                try:
                    async for acked in stream:
                        self.records.acknowledged(name, payloads[answered], acked)
                        answered += 1
                except Exception as exc:
                    failed = True
                    self.records.failed(name, payloads[answered], exc)
                    # taken and then cancelled or unanswered: they may be in the log
                    for payload in payloads[answered + 1 : pulled]:
                        self.records.failed_as(name, payload, WriteOutcome.UNKNOWN)
                finally:
                    await stream.aclose()
                await self._rest(failed)

        return run

    def cluster_txns(
        self, name: str, client: ClusterClient, size: int, expire_every: int, rollback_every: int
    ) -> Writer:
        """Transactions of ``size`` appends on the vchannel :data:`TXN_VCHANNEL`,
        committed; every ``expire_every``-th is left idle past a short keepalive before
        its commit (the owner must answer it expired), every ``rollback_every``-th is
        rolled back instead."""

        async def run() -> None:
            number = 0
            while not self._stop.is_set():
                number += 1
                payloads = self._payloads(name, number * size, size)
                plan = "commit"
                if expire_every > 0 and number % expire_every == 0:
                    plan = "expire"
                elif rollback_every > 0 and number % rollback_every == 0:
                    plan = "rollback"
                committed = await self._txn(name, client, payloads, plan)
                await self._rest(not committed and plan == "commit")

        return run

    async def _txn(
        self, name: str, client: ClusterClient, payloads: list[bytes], plan: str
    ) -> bool:
        """One transaction, recorded with what its client was told; whether it committed."""
        # short enough to expire between two faults, which would end it otherwise
        keepalive = _EXPIRING_KEEPALIVE_S if plan == "expire" else self._keepalive
        try:
            txn = await client.begin_txn(self.channel, TXN_VCHANNEL, keepalive_s=keepalive)
        except Exception as exc:  # no id: a begin that landed is never used, and expires
            self.records.note(name, exc)
            return False
        members: list[Ack] = []
        for payload in payloads:
            try:
                acked = await txn.produce(payload)
            except Exception as exc:
                self.records.failed(name, payload, exc)
                await self._end_unsent(name, txn, members)
                return False
            members.append(self.records.acknowledged(name, payload, acked))
        if plan == "rollback":
            await self._end_unsent(name, txn, members)
            return False
        if plan == "expire":
            self.txn_sleeps += 1
            await asyncio.sleep(keepalive * 3)
        try:
            commit = await txn.commit()
        except Exception as exc:
            self.records.note(name, exc)
            if isinstance(exc, TransactionExpiredError):
                self._txn_told(txn, TxnOutcome.EXPIRED, members)
            elif isinstance(exc, TransactionError) and exc.outcome is WriteOutcome.NOT_WRITTEN:
                self._txn_told(txn, TxnOutcome.ABORTED, members)
            elif outcome_of(exc) is WriteOutcome.UNKNOWN:
                self._txn_told(txn, TxnOutcome.UNKNOWN, members)
            else:  # no try of the commit reached an owner that could write it
                await self._end_unsent(name, txn, members)
            return False
        # a commit's payload is its count, not a client's: kept out of the acks
        ack = Ack(commit.message_id, commit.time_tick, digest(str(len(members)).encode()))
        self.records.txns.append(TxnRecord(txn.txn_id, TxnOutcome.COMMITTED, ack, tuple(members)))
        return True

    async def _end_unsent(self, name: str, txn: Transaction, members: list[Ack]) -> None:
        """Roll back a transaction no commit of which was sent: whatever the answer, it
        must never commit (it is rolled back, or expires)."""
        try:
            await txn.rollback()
        except Exception as exc:
            self.records.note(name, exc)
            told = TxnOutcome.EXPIRED if isinstance(exc, TransactionExpiredError) else None
            self._txn_told(txn, told or TxnOutcome.ABANDONED, members)
            return
        self._txn_told(txn, TxnOutcome.ROLLED_BACK, members)

    def _txn_told(self, txn: Transaction, outcome: str, members: list[Ack]) -> None:
        self.records.txns.append(TxnRecord(txn.txn_id, outcome, None, tuple(members)))

    # ---- NodeClient ------------------------------------------------------------------
    def node_unary(self, name: str, retries: int) -> Writer:
        clients = self.node_clients(retries)
        return self._unary(name, lambda: clients[self._route.address])

    def node_unary_shared(self, name: str, retries: int, writers: int) -> list[Writer]:
        """``writers`` unary writers sharing one client per address: their appends meet
        and the client coalesces them into frames (``NodeClient``'s default)."""
        clients = self.node_clients(retries)
        return [
            self._unary(f"{name} #{i}", lambda: clients[self._route.address])
            for i in range(writers)
        ]

    def node_streams_shared(self, name: str, in_flight: int, writers: int) -> list[Writer]:
        """``writers`` stream writers sharing one client per address: their streams on
        the channel share one call, their appends its frames."""
        clients = self.node_clients(0)
        return [
            self.node_stream(f"{name} #{i}", in_flight, clients=clients) for i in range(writers)
        ]

    def coalesced(self) -> tuple[int, int]:
        """Frames the NodeClient writers' clients coalesced so far, and the appends in
        them."""
        counts = [client.coalesced for client in self._node_clients]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)

    def node_batch(self, name: str, retries: int, sizes: tuple[int, int]) -> Writer:
        clients = self.node_clients(retries)
        return self._batches(name, lambda: clients[self._route.address], sizes)

    def node_stream(
        self,
        name: str,
        in_flight: int,
        *,
        coalesce: bool = True,
        clients: dict[str, NodeClient] | None = None,
    ) -> Writer:
        """Appends on one long-lived stream (``open_stream``), ``in_flight`` at a time
        (made together: with ``coalesce`` they go as one frame); a stream with a failed
        append is closed and one is opened on the owner. ``clients``: the writer's
        clients (default: its own)."""
        clients = self.node_clients(0) if clients is None else clients

        async def run() -> None:
            n = 0
            stream: AppendStream | None = None
            try:
                while not self._stop.is_set():
                    if stream is None:
                        client = clients[self._route.address]
                        stream = client.open_stream(self.channel, coalesce=coalesce)
                    payloads = self._payloads(name, n, in_flight)
                    n += len(payloads)
                    answers = await asyncio.gather(
                        *(stream.append(p) for p in payloads), return_exceptions=True
                    )
                    failed = False
                    for payload, answer in zip(payloads, answers, strict=True):
                        if isinstance(answer, Acked):
                            self.records.acknowledged(name, payload, answer)
                        else:
                            failed = True
                            self.records.failed(name, payload, answer, stream=True)
                    if failed:
                        await stream.close()
                        stream = None
                    await self._rest(failed)
            finally:
                if stream is not None:
                    await stream.close()

        return run

    # ---- batches, either client ------------------------------------------------------
    async def _batch(self, name: str, payloads: list[bytes], call: Awaitable[list[Acked]]) -> bool:
        """Record a batch's answers, message by message; whether any failed."""
        self.records.batches.append([digest(p) for p in payloads])
        try:
            acked = await call
        except BatchProduceError as exc:
            for payload, result in zip(payloads, exc.results, strict=True):
                if isinstance(result, Acked):
                    self.records.acknowledged(name, payload, result)
                else:
                    self.records.failed(name, payload, result)
            return True
        except Exception as exc:
            self.records.note(name, exc)
            for payload in payloads:
                self.records.failed_as(name, payload, outcome_of(exc))
            return True
        for payload, a in zip(payloads, acked, strict=True):
            self.records.acknowledged(name, payload, a)
        return False
