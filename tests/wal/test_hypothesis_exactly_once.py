"""A stateful property test of idempotent appends and transactions (hypothesis).

The machine drives owners of one channel on the in-process backend against a model:
idempotent appends, their retries, ambiguous failures (persisted, answer lost),
transactions begun, appended into, committed, rolled back and expired (elapsed time
on the owner's clock, while TSO time jumps on), and changes of owner. After every
step a reader of the whole log must deliver exactly the model's messages, in order:
each acknowledged append once, each committed transaction whole at its commit,
nothing of a transaction that did not commit. LastConfirmed must never pass the begin
of a transaction still open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.errors import (
    ChannelFencedError,
    OutcomeUnknownError,
    TransactionError,
)
from streamwal.wal import WAL, DeliveryPolicy, MessageType, MutableMessage, open_wal
from streamwal.wal.interceptors import AppendResult
from tests.wal.testkit import (
    BatchAllocator,
    CounterTSO,
    ManualClock,
    RecordingOpener,
    fast_config,
    log_messages,
)

CHANNEL = "exactly-once"
VCHANNEL = "v1"
KEEPALIVE_S = 0.05
_T = TypeVar("_T")


@dataclass
class _Producer:
    next_seq: int = 0
    results: dict[int, AppendResult | None] = field(default_factory=dict)  # None: unknown


@dataclass
class _Txn:
    txn_id: int
    payloads: list[bytes] = field(default_factory=list)


class ExactlyOnce(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.store = MemoryLogStore()
        self.tso = CounterTSO()
        self.clock = ManualClock()
        self.node_id = 0
        self.wal: WAL = self._run(self._open())
        self.producers = {pid: _Producer() for pid in (1, 2)}
        self.open_txns: list[_Txn] = []
        self.expired: set[int] = set()
        self.expected: list[bytes] = []
        self.counter = 0
        self.payloads: dict[tuple[int, int], bytes] = {}

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(coro)

    async def _open(self) -> WAL:
        self.node_id += 1
        return await open_wal(
            RecordingOpener(self.store),
            CHANNEL,
            BatchAllocator(self.tso),
            self.node_id,
            fast_config(txn_keepalive=KEEPALIVE_S),
            clock=self.clock,
        )

    def _payload(self, kind: str) -> bytes:
        self.counter += 1
        return f"{kind}-{self.counter}".encode()

    # -- idempotent appends -------------------------------------------------------------

    @rule(pid=st.sampled_from([1, 2]), lose_answer=st.booleans())
    def append(self, pid: int, lose_answer: bool) -> None:
        producer = self.producers[pid]
        seq = producer.next_seq
        payload = self._payload(f"p{pid}s{seq}")
        msg = MutableMessage(MessageType.INSERT, payload, VCHANNEL).with_producer(pid, seq)
        self.store.faults.lose_answers = 1 if lose_answer else 0
        try:
            result: AppendResult | None = self._run(self.wal.append(msg))
        except OutcomeUnknownError:
            assert lose_answer
            result = None
        self.store.faults.lose_answers = 0
        producer.next_seq += 1
        producer.results[seq] = result
        self.payloads[pid, seq] = payload
        self.expected.append(payload)  # persisted either way: every reader must see it

    @rule(pid=st.sampled_from([1, 2]), data=st.data())
    def retry(self, pid: int, data: st.DataObject) -> None:
        producer = self.producers[pid]
        if not producer.results:
            return
        seq = data.draw(st.sampled_from(sorted(producer.results)))
        payload = self.payloads[pid, seq]
        msg = MutableMessage(MessageType.INSERT, payload, VCHANNEL).with_producer(pid, seq)
        result = self._run(self.wal.append(msg))
        first = producer.results[seq]
        if first is not None:
            assert result == first, "a retry must get the first result"
        producer.results[seq] = result

    # -- transactions -------------------------------------------------------------------

    @precondition(lambda self: len(self.open_txns) < 2)
    @rule()
    def begin(self) -> None:
        self.open_txns.append(_Txn(self._run(self.wal.begin_txn(VCHANNEL))))

    @precondition(lambda self: bool(self.open_txns))
    @rule(data=st.data())
    def append_in_txn(self, data: st.DataObject) -> None:
        txn = data.draw(st.sampled_from(self.open_txns))
        payload = self._payload(f"t{txn.txn_id}")
        self._run(
            self.wal.append(
                MutableMessage(MessageType.INSERT, payload, VCHANNEL, txn_id=txn.txn_id)
            )
        )
        txn.payloads.append(payload)

    @precondition(lambda self: bool(self.open_txns))
    @rule(data=st.data(), commit=st.booleans())
    def end_txn(self, data: st.DataObject, commit: bool) -> None:
        txn = data.draw(st.sampled_from(self.open_txns))
        self.open_txns.remove(txn)
        if commit:
            self._run(self.wal.commit_txn(txn.txn_id))
            self.expected.extend(txn.payloads)
        else:
            self._run(self.wal.rollback_txn(txn.txn_id))

    @precondition(lambda self: bool(self.open_txns))
    @rule()
    def expire(self) -> None:
        """Elapsed time passes the keepalive; the next message expires them. (Was TSO
        time moving on: that was the wrong rule, see ``tso_jump``.)"""
        self.clock.advance(KEEPALIVE_S * 2)
        payload = self._payload("tick")
        self._run(self.wal.append(MutableMessage(MessageType.INSERT, payload, VCHANNEL)))
        self.expected.append(payload)
        for txn in self.open_txns:
            with pytest.raises(TransactionError):
                self._run(self.wal.commit_txn(txn.txn_id))
            self.expired.add(txn.txn_id)
        self.open_txns.clear()

    @rule()
    def tso_jump(self) -> None:
        """TSO time jumps far past the keepalive (a new cached block): nothing expires."""
        self.tso._next += round(KEEPALIVE_S * 100_000) << 18
        self._run(self.wal.params.allocator.sync())
        payload = self._payload("jump")
        self._run(self.wal.append(MutableMessage(MessageType.INSERT, payload, VCHANNEL)))
        self.expected.append(payload)
        assert self.wal.open_transactions == len(self.open_txns)

    # -- changes of owner ---------------------------------------------------------------

    @rule()
    def takeover(self) -> None:
        old = self.wal
        self.wal = self._run(self._open())
        for txn in self.open_txns:
            with pytest.raises((ChannelFencedError, TransactionError)):
                self._run(old.commit_txn(txn.txn_id))
            with pytest.raises(TransactionError):
                self._run(self.wal.commit_txn(txn.txn_id))
        self.open_txns.clear()
        self._run(old.close())

    # -- what a reader sees -------------------------------------------------------------

    @invariant()
    def a_reader_delivers_the_model(self) -> None:
        sentinel = self._payload("sentinel")
        self._run(self.wal.append(MutableMessage(MessageType.INSERT, sentinel, VCHANNEL)))
        self.expected.append(sentinel)
        self._run(self._read_until(sentinel))

    async def _read_until(self, sentinel: bytes) -> None:
        scanner = await self.wal.read(DeliveryPolicy.all(), vchannel=VCHANNEL)
        delivered: list[bytes] = []
        try:
            async with asyncio.timeout(5):
                async for msg in scanner:
                    if msg.type is MessageType.INSERT:
                        delivered.append(msg.payload)
                        if msg.payload == sentinel:
                            break
        finally:
            await scanner.close()
        assert delivered == self.expected

    @invariant()
    def last_confirmed_holds_at_open_begins(self) -> None:
        log = log_messages(self.store, CHANNEL)
        open_begins: dict[int, tuple[int, object]] = {}  # txn id -> (source, begin id)
        for msg in log:
            if msg.type is MessageType.ROLLBACK_TXN:  # rolled back once decided
                open_begins.pop(msg.txn_id or 0, None)
            for txn_id, (source, begin_id) in open_begins.items():
                if msg.source == source and txn_id not in self.expired:
                    assert msg.last_confirmed <= begin_id, f"{msg} passed open txn {txn_id}"
            if msg.type is MessageType.BEGIN_TXN:
                open_begins[msg.time_tick] = (msg.source, msg.message_id)
            elif msg.type in (MessageType.COMMIT_TXN, MessageType.ROLLBACK_TXN):
                assert msg.txn_id is not None
                open_begins.pop(msg.txn_id, None)

    def teardown(self) -> None:
        self._run(self.wal.close())
        self.loop.close()


TestExactlyOnce = ExactlyOnce.TestCase
TestExactlyOnce.settings = settings(
    max_examples=60,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
