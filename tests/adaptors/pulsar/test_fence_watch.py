"""A writer whose producer gets no answers learns of a newer owner from the log (the
real broker; adaptors.pulsar.fencewatch).

The old owner's writing client reaches the broker through a proxy that is then cut, as
a failed lookup during a topic move leaves the C++ client: no connection and no retry
until the send timeout. Its reading client still reaches the broker directly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pulsar
import pytest
from pulsar import asyncio as pulsar_asyncio

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.adaptors.pulsar.channel import PulsarBackendWAL
from streamwal.adaptors.pulsar.clients import WriterClients
from streamwal.adaptors.pulsar.fencewatch import STALL_S
from streamwal.adaptors.testing import writable
from streamwal.errors import ChannelFencedError, WriteOutcome
from streamwal.wal.backend import BackendWAL, append_entry
from streamwal.wal.initializing import open_wal
from streamwal_lab.faultproxy import FaultProxy
from streamwal_lab.stack import StackInfo
from tests.adaptors.pulsar.topic_log import read_log
from tests.wal.testkit import BatchAllocator, CounterTSO

pytestmark = pytest.mark.integration

#: appends in flight when the proxy is cut
IN_FLIGHT = 5


class _CutOff:
    """An opener whose writing channels reach the broker through ``proxy`` only."""

    def __init__(self, config: PulsarConfig, proxy: FaultProxy) -> None:
        self.opener = PulsarOpener(config)
        url = f"pulsar://{proxy.url_host}"
        self.opener._writer_clients = WriterClients(
            lambda: pulsar_asyncio.Client(url, operation_timeout_seconds=5), 0, 5.0
        )

    async def writing(self, channel: str) -> tuple[PulsarBackendWAL, list[bytes]]:
        """``channel`` opened for writing through the proxy, and what its first three
        appends (``old-0`` to ``old-2``) wrote, before any fault."""
        wal = await writable(self.opener, channel)
        assert isinstance(wal, PulsarBackendWAL)
        return wal, await _first_appends(wal, "old", 3)


@pytest.fixture
async def proxy(stack: StackInfo) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(int(stack.pulsar_url.rsplit(":", 1)[1])) as proxy:
        yield proxy


async def _first_appends(wal: BackendWAL, name: str, n: int) -> list[bytes]:
    payloads = [f"{name}-{i}".encode() for i in range(n)]
    for payload in payloads:
        await append_entry(wal, payload, {})
    return payloads


def _in_flight(wal: BackendWAL, name: str) -> list[asyncio.Future[Any]]:
    """``IN_FLIGHT`` appends sent now, not awaited."""
    return [
        asyncio.ensure_future(append_entry(wal, f"{name}-{i}".encode(), {}))
        for i in range(IN_FLIGHT)
    ]


async def _new_owner_writes(
    opener: PulsarOpener,
    channel: str,
    landed: list[bytes],
    pending: Sequence[asyncio.Future[Any]],
    timeout: float,
) -> tuple[BackendWAL, list[object]]:
    """A new owner opens ``channel`` and appends once (added to ``landed``); its WAL,
    and what the old owner's ``pending`` appends were answered within ``timeout``."""
    new = await writable(opener, channel)
    landed += await _first_appends(new, "new", 1)
    answers = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), timeout)
    return new, answers


def _assert_fenced(answers: Sequence[object], outcome: WriteOutcome) -> None:
    assert all(isinstance(a, ChannelFencedError) for a in answers), answers
    assert {a.outcome for a in answers if isinstance(a, ChannelFencedError)} == {outcome}


async def _log(stack: StackInfo, config: PulsarConfig, channel: str) -> list[bytes]:
    """The channel's log, in order."""
    log = await asyncio.to_thread(read_log, stack.pulsar_url, config.topic(channel))
    return list(log.values())


async def test_a_cut_off_writer_is_fenced_within_seconds_and_its_appends_are_not_written(
    stack: StackInfo, proxy: FaultProxy, unique: str
) -> None:
    channel = f"fence-watch-{unique}"
    config = PulsarConfig(service_url=stack.pulsar_url)  # send timeout: 30 s
    old = _CutOff(config, proxy)
    async with old.opener, PulsarOpener(config) as new_opener:
        wal, landed = await old.writing(channel)
        proxy.set_mode("refuse")
        cut = time.monotonic()
        pending = _in_flight(wal, "lost")
        await asyncio.sleep(0.1)
        assert not any(p.done() for p in pending)

        new, answers = await _new_owner_writes(new_opener, channel, landed, pending, timeout=10)
        took = time.monotonic() - cut
        # nothing of the old producer could land after it was closed, and the log
        # holds none of them: not written, so a caller may retry on the new owner
        _assert_fenced(answers, WriteOutcome.NOT_WRITTEN)
        assert took < 5 * STALL_S + 3, f"the old owner learned of its fence after {took:.1f}s"
        assert wal.is_fenced
        started = time.monotonic()
        with pytest.raises(ChannelFencedError):
            await append_entry(wal, b"after", {})
        assert time.monotonic() - started < 0.5
        await wal.close()
        await new.close()
    assert await _log(stack, config, channel) == landed


class _HungReaders:
    """The first reader the watch's look creates (from the topic's end) and the first
    one the read after the fence creates (from a position) answer only after
    ``late_s``, as a subscribe that reached a broker giving the topic up."""

    def __init__(self, client: Any, late_s: float) -> None:
        self._create = client.create_reader
        self.late_s = late_s
        self.created = {"look": 0, "after the fence": 0}
        #: the creations held back (each runs in a task of its own)
        self.late: list[asyncio.Task[Any]] = []
        client.create_reader = self.create_reader

    async def create_reader(self, topic: str, start: Any, *args: Any, **kwargs: Any) -> Any:
        role = "look" if start is pulsar.MessageId.latest else "after the fence"
        self.created[role] += 1
        if self.created[role] == 1:
            task = asyncio.current_task()
            assert task is not None
            self.late.append(task)
            await asyncio.sleep(self.late_s)
        return await self._create(topic, start, *args, **kwargs)


async def test_a_fenced_writer_whose_readers_hang_still_learns_what_it_wrote(
    stack: StackInfo, proxy: FaultProxy, unique: str
) -> None:
    """The watch's look and its read after the fence each meet a reader that answers
    only after the operation timeout (the topic moving): each is given up on and read
    again on a fresh reader, so the fence comes within seconds and the appends in
    flight are still known not written (not unknown)."""
    channel = f"fence-watch-hung-{unique}"
    config = PulsarConfig(service_url=stack.pulsar_url, operation_timeout_s=2)
    old = _CutOff(config, proxy)
    async with old.opener, PulsarOpener(config) as new_opener:
        wal, landed = await old.writing(channel)
        hung = _HungReaders(wal._state.client, late_s=2 * config.operation_timeout_s)
        proxy.set_mode("refuse")
        cut = time.monotonic()
        pending = _in_flight(wal, "lost")
        new, answers = await _new_owner_writes(new_opener, channel, landed, pending, timeout=20)
        took = time.monotonic() - cut
        _assert_fenced(answers, WriteOutcome.NOT_WRITTEN)
        # each hung reader was given up on and replaced
        assert min(hung.created.values()) >= 2, hung.created
        assert took < 5 * STALL_S + 3, f"the old owner learned of its fence after {took:.1f}s"
        # the late readers come, and are closed
        await asyncio.gather(*hung.late, return_exceptions=True)
        await asyncio.sleep(0.1)
        await wal.close()
        await new.close()
    assert await _log(stack, config, channel) == landed


async def test_a_cut_off_writer_with_no_newer_owner_keeps_its_channel(
    stack: StackInfo, proxy: FaultProxy, unique: str
) -> None:
    channel = f"fence-watch-alone-{unique}"
    config = PulsarConfig(service_url=stack.pulsar_url)
    old = _CutOff(config, proxy)
    async with old.opener:
        wal, landed = await old.writing(channel)
        proxy.set_mode("refuse")
        pending = _in_flight(wal, "late")
        await asyncio.sleep(6 * STALL_S)  # the watch read the topic more than once
        assert not any(p.done() for p in pending)
        assert not wal.is_fenced
        proxy.set_mode("pass")
        ids = await asyncio.wait_for(asyncio.gather(*pending), timeout=30)
        assert ids == sorted(ids)
        await wal.close()
    assert await _log(stack, config, channel) == landed + [
        f"late-{i}".encode() for i in range(IN_FLIGHT)
    ]


async def test_a_writer_whose_answers_are_lost_is_fenced_with_an_unknown_outcome(
    stack: StackInfo, proxy: FaultProxy, unique: str
) -> None:
    """The broker took the appends, their receipts were lost: they are in the log
    before the new owner's entries, so they are not answered as not written."""
    channel = f"fence-watch-answers-{unique}"
    config = PulsarConfig(service_url=stack.pulsar_url)
    old = _CutOff(config, proxy)
    async with old.opener, PulsarOpener(config) as new_opener:
        wal, landed = await old.writing(channel)
        proxy.drop_answers = True
        sent = [f"unanswered-{i}".encode() for i in range(IN_FLIGHT)]
        pending = [asyncio.ensure_future(append_entry(wal, p, {})) for p in sent]
        await asyncio.sleep(0.5)  # they reach the broker; the answers do not come back
        new = await writable(new_opener, channel)
        landed += sent + await _first_appends(new, "new", 1)
        answers = await asyncio.wait_for(
            asyncio.gather(*pending, return_exceptions=True), timeout=20
        )
        _assert_fenced(answers, WriteOutcome.UNKNOWN)
        await wal.close()
        await new.close()
    assert await _log(stack, config, channel) == landed


async def test_an_open_whose_first_time_tick_gets_no_answer_makes_a_new_writer(
    stack: StackInfo, proxy: FaultProxy, unique: str
) -> None:
    """The first attempt's answer is lost (the broker holds a producer the client no
    longer hears from): after the operation timeout its writer is closed and the next
    attempt fences and writes with a new one, instead of retrying on the dead one."""
    channel = f"fence-watch-open-{unique}"
    config = PulsarConfig(service_url=stack.pulsar_url, operation_timeout_s=2.0)
    allocator = BatchAllocator(CounterTSO())

    async def lose_the_first_answer() -> None:
        if allocator.syncs == 1:  # after the first fence, before its time tick is sent
            proxy.drop_answers = True
            asyncio.get_running_loop().call_later(0.5, setattr, proxy, "drop_answers", False)

    allocator.on_sync = lose_the_first_answer
    cut_off = _CutOff(config, proxy)
    async with cut_off.opener:
        started = time.monotonic()
        wal = await asyncio.wait_for(open_wal(cut_off.opener, channel, allocator, 1), 20)
        took = time.monotonic() - started
        await wal.close()
    assert allocator.syncs == 2, "one attempt after the lost answer"
    assert took < config.operation_timeout_s + 5, f"open took {took:.1f}s"
    # the lost first time tick landed (only its answer was dropped); the second follows it
    assert len(await _log(stack, config, channel)) == 2
