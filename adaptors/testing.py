"""The backend contract's conformance suite, shipped for every backend to run.

A backend fixture yields a ``BackendHarness``: two openers on the same log store
(two nodes) plus a way to read the raw log. The same assertions then hold for the
in-process backend and for real Pulsar, and for any other backend: in its own tests,
subclass :class:`ConformanceSuite` and provide a ``harness`` fixture (the suite runs
under pytest with pytest-asyncio in auto mode)::

    class TestMyBackend(ConformanceSuite):
        @pytest.fixture
        def harness(self) -> BackendHarness:
            return BackendHarness(node_a=..., node_b=..., channel=..., ...)

It is part of the product, so it imports no test runner: a failed check raises
``AssertionError`` (through :func:`raises` where an error is the expected answer),
which any runner reports, and each check is a plain coroutine method another runner
can await with a harness.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from streamwal.errors import ChannelFencedError, ClosedError, InvalidInputError
from streamwal.wal.backend import (
    AccessMode,
    BackendMessage,
    BackendOpener,
    BackendWAL,
    DeliveryPolicy,
    append_entry,
)
from streamwal.wal.message_id import MessageId

__all__ = [
    "BackendHarness",
    "ConformanceSuite",
    "append_many",
    "raises",
    "read_all",
    "take",
    "writable",
]


@dataclass
class BackendHarness:
    node_a: BackendOpener
    node_b: BackendOpener
    channel: Callable[[], str]
    max_message_size: int
    foreign_id: MessageId


@contextmanager
def raises(expected: type[BaseException]) -> Iterator[None]:
    """Fail unless the block raises ``expected`` (or a subclass), as
    ``pytest.raises`` would: the product must import without a test runner."""
    try:
        yield
    except expected:
        return
    raise AssertionError(f"did not raise {expected.__name__}")


async def take(scanner: object, count: int, timeout: float = 10.0) -> list[BackendMessage]:
    out: list[BackendMessage] = []

    async def run() -> None:
        async for entry in scanner:  # type: ignore[attr-defined]
            out.append(entry)
            if len(out) == count:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def read_all(opener: BackendOpener, channel: str, count: int) -> list[BackendMessage]:
    wal = await opener.open(channel, AccessMode.READ_ONLY)
    try:
        scanner = await wal.read(DeliveryPolicy.all())
        try:
            return await take(scanner, count)
        finally:
            await scanner.close()
    finally:
        await wal.close()


async def writable(opener: BackendOpener, channel: str) -> BackendWAL:
    wal = await opener.open(channel, AccessMode.READ_WRITE)
    await wal.ensure_writable()
    return wal


async def append_many(wal: BackendWAL, prefix: str, count: int) -> list[MessageId]:
    futures: list[Awaitable[MessageId]] = [
        append_entry(wal, f"{prefix}-{i}".encode(), {"seq": str(i), "who": prefix})
        for i in range(count)
    ]
    return list(await asyncio.gather(*futures))


async def _collect(scanner: Any, into: list[BackendMessage]) -> None:
    """Read ``scanner`` into ``into`` until cancelled, then close it."""
    try:
        async for entry in scanner:
            into.append(entry)
    finally:
        await scanner.close()


async def _wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the readers did not see every acknowledged entry in time")
        await asyncio.sleep(0.02)


class ConformanceSuite:
    """Subclass in a test module and provide the ``harness`` fixture."""

    async def test_append_returns_ordered_ids_and_read_all(self, harness: BackendHarness) -> None:
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        ids = await append_many(wal, "a", 20)
        assert ids == sorted(ids)
        assert len(set(ids)) == 20
        entries = await read_all(harness.node_b, channel, 20)
        assert [e.message_id for e in entries] == ids
        assert [e.payload for e in entries] == [f"a-{i}".encode() for i in range(20)]
        assert entries[3].properties["seq"] == "3"
        await wal.close()

    async def test_submit_answers_each_entry_once_in_log_order(
        self, harness: BackendHarness
    ) -> None:
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        answers: list[tuple[int, MessageId | None, BaseException | None]] = []
        finished = asyncio.Event()

        def done_for(i: int) -> Callable[[MessageId | None, BaseException | None], None]:
            def done(message_id: MessageId | None, error: BaseException | None) -> None:
                answers.append((i, message_id, error))
                if len(answers) == 30:
                    finished.set()

            return done

        for i in range(30):
            wal.submit(f"s-{i}".encode(), {"seq": str(i)}, done_for(i))
        await asyncio.wait_for(finished.wait(), 10)
        await asyncio.sleep(0.05)  # a second answer for any entry would land by now
        assert len(answers) == 30
        assert all(error is None for _, _, error in answers)
        by_entry = {i: message_id for i, message_id, _ in answers}
        ids = [by_entry[i] for i in range(30)]
        assert all(i is not None for i in ids)
        landed = [i for i in ids if i is not None]
        assert landed == sorted(landed) and len(set(landed)) == 30
        entries = await read_all(harness.node_b, channel, 30)
        assert [e.payload for e in entries] == [f"s-{i}".encode() for i in range(30)]
        await writable(harness.node_b, channel)  # takes the channel over
        refused: list[BaseException | None] = []
        wal.submit(b"late", {}, lambda _id, error: refused.append(error))
        await asyncio.sleep(0)
        for _ in range(200):
            if refused:
                break
            await asyncio.sleep(0.05)
        assert len(refused) == 1 and isinstance(refused[0], ChannelFencedError)
        await wal.close()

    async def test_message_ids_round_trip_and_sort_like_the_log(
        self, harness: BackendHarness
    ) -> None:
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        ids = await append_many(wal, "a", 10)
        for message_id in ids:
            again = harness.node_a.message_id_from_bytes(message_id.to_bytes())
            assert again == message_id
            assert hash(again) == hash(message_id)
            assert str(again) == str(message_id)
        shuffled = list(reversed(ids))
        assert sorted(shuffled) == ids
        assert ids[0] < ids[1] <= ids[1] < ids[-1]
        await wal.close()

    async def test_delivery_policies(self, harness: BackendHarness) -> None:
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        ids = await append_many(wal, "a", 6)

        async def first(policy: DeliveryPolicy, count: int) -> list[MessageId]:
            scanner = await wal.read(policy)
            try:
                return [e.message_id for e in await take(scanner, count)]
            finally:
                await scanner.close()

        assert await first(DeliveryPolicy.all(), 6) == ids
        assert await first(DeliveryPolicy.start_from(ids[2]), 4) == ids[2:]
        assert await first(DeliveryPolicy.start_after(ids[2]), 3) == ids[3:]
        assert await first(DeliveryPolicy.start_after(ids[4]), 1) == ids[5:]

        latest = await wal.read(DeliveryPolicy.latest())
        later = await append_many(wal, "b", 2)
        assert [e.message_id for e in await take(latest, 2)] == later
        await latest.close()
        await wal.close()

    async def test_takeover_fences_the_old_owner(self, harness: BackendHarness) -> None:
        channel = harness.channel()
        a = await writable(harness.node_a, channel)
        acked_a = await append_many(a, "a", 10)
        b = await writable(harness.node_b, channel)
        with raises(ChannelFencedError):
            await append_entry(a, b"a-late", {})
        # fenced for good: every later append and re-open of the writer fails fast
        for _ in range(3):
            with raises(ChannelFencedError):
                await append_entry(a, b"a-later", {})
        with raises(ChannelFencedError):
            await a.ensure_writable()
        acked_b = await append_many(b, "b", 5)
        entries = await read_all(harness.node_b, channel, 15)
        assert [e.message_id for e in entries] == acked_a + acked_b
        first_b = next(i for i, e in enumerate(entries) if e.properties.get("who") == "b")
        assert all(e.properties.get("who") == "b" for e in entries[first_b:])
        # readers of the old owner keep working
        scanner = await a.read(DeliveryPolicy.all())
        assert len(await take(scanner, 15)) == 15
        await scanner.close()
        await a.close()
        await b.close()

    async def test_several_owners_in_a_row_with_readers_during_appends(
        self, harness: BackendHarness
    ) -> None:
        """Owners take the channel over in turn, from both nodes, while readers run:
        each owner fences the one before, and the readers see every acknowledged entry,
        once, in the order of the log, each owner's after the previous one's."""
        channel = harness.channel()
        owners = [harness.node_a, harness.node_b, harness.node_a, harness.node_b]
        per_term = 12
        first = await writable(owners[0], channel)
        reader = await harness.node_b.open(channel, AccessMode.READ_ONLY)
        from_start: list[BackendMessage] = []
        mid_way: list[BackendMessage] = []
        readers = [
            asyncio.create_task(_collect(await reader.read(DeliveryPolicy.all()), from_start))
        ]
        acked: list[tuple[bytes, MessageId]] = []
        previous: BackendWAL | None = None
        for term, opener in enumerate(owners):
            wal = first if term == 0 else await writable(opener, channel)
            if previous is not None:
                with raises(ChannelFencedError):
                    await append_entry(previous, f"late-{term - 1}".encode(), {})
                await previous.close()
            if term == 2:  # a reader that starts mid-way, from an acknowledged entry
                scanner = await reader.read(DeliveryPolicy.start_from(acked[-1][1]))
                readers.append(asyncio.create_task(_collect(scanner, mid_way)))
            ids = await append_many(wal, f"t{term}", per_term)
            acked += [(f"t{term}-{i}".encode(), mid) for i, mid in enumerate(ids)]
            previous = wal
        assert previous is not None
        await _wait_for(lambda: len(from_start) >= len(acked) and len(mid_way) >= 2 * per_term + 1)
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        assert [(e.payload, e.message_id) for e in from_start] == acked
        assert [e.message_id for e in from_start] == sorted(e.message_id for e in from_start)
        assert [(e.payload, e.message_id) for e in mid_way] == acked[2 * per_term - 1 :]
        again = await read_all(harness.node_a, channel, len(acked))
        assert [e.message_id for e in again] == [mid for _, mid in acked]
        await reader.close()
        await previous.close()

    async def test_concurrent_pipelined_appends_keep_call_order(
        self, harness: BackendHarness
    ) -> None:
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        ids = await append_many(wal, "p", 500)
        entries = await read_all(harness.node_b, channel, 500)
        assert [int(e.properties["seq"]) for e in entries] == list(range(500))
        assert [e.message_id for e in entries] == ids
        await wal.close()

    async def test_bad_inputs_are_typed(self, harness: BackendHarness) -> None:
        for bad in ["", "has space", "a/b", "x" * 300, "-leading"]:
            with raises(InvalidInputError):
                await harness.node_a.open(bad, AccessMode.READ_WRITE)
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        with raises(InvalidInputError):
            await append_entry(wal, b"x" * (harness.max_message_size + 1), {})
        await append_many(wal, "ok", 2)  # the oversized one broke nothing
        with raises(InvalidInputError):
            await wal.read(DeliveryPolicy.start_from(harness.foreign_id))
        read_only = await harness.node_b.open(channel, AccessMode.READ_ONLY)
        with raises(InvalidInputError):
            await read_only.ensure_writable()
        await read_only.close()
        await wal.close()

    async def test_a_property_that_is_not_a_string_is_typed(self, harness: BackendHarness) -> None:
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        bad = append_entry(wal, b"bad", {"k": 1})  # type: ignore[dict-item]
        good = append_entry(wal, b"good", {"k": "v"})  # same burst: must not be stranded
        with raises(InvalidInputError):
            await bad
        await good
        entries = await take(await wal.read(DeliveryPolicy.all()), 1)
        assert [e.payload for e in entries] == [b"good"]
        await wal.close()

    async def test_closed_scanners_are_released(self, harness: BackendHarness) -> None:
        """A node opens a scanner per read request: a closed one must not stay
        referenced by its channel for the channel's lifetime."""
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        await append_many(wal, "a", 1)
        refs = []
        for _ in range(3):
            scanner = await wal.read(DeliveryPolicy.all())
            await take(scanner, 1)
            await scanner.close()
            refs.append(weakref.ref(scanner))
        del scanner
        gc.collect()
        assert [ref() for ref in refs] == [None, None, None]
        await wal.close()

    async def test_close_is_idempotent_and_final(self, harness: BackendHarness) -> None:
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        await wal.close()
        await wal.close()
        with raises(ClosedError):
            await append_entry(wal, b"x", {})
        with raises(ClosedError):
            await wal.read(DeliveryPolicy.all())

    async def test_closing_ends_a_pending_read_with_closed_error(
        self, harness: BackendHarness
    ) -> None:
        """A log has no end, so a read waits until closed: closing the scanner, or the
        channel it reads, must end the wait at once with ClosedError (never a hang,
        never a silent end of iteration), and so must every later read."""
        channel = harness.channel()
        wal = await writable(harness.node_a, channel)
        await append_many(wal, "a", 2)
        own = await wal.read(DeliveryPolicy.latest())
        by_channel = await wal.read(DeliveryPolicy.latest())
        pending_own = asyncio.ensure_future(own.__anext__())
        pending_by_channel = asyncio.ensure_future(by_channel.__anext__())
        await asyncio.sleep(0.2)
        assert not pending_own.done() and not pending_by_channel.done()  # really waiting

        await own.close()
        with raises(ClosedError):
            await asyncio.wait_for(pending_own, 2)
        with raises(ClosedError):
            await own.__anext__()
        assert not pending_by_channel.done()  # the other scanner is not affected

        await wal.close()
        with raises(ClosedError):
            await asyncio.wait_for(pending_by_channel, 2)
        with raises(ClosedError):
            await by_channel.__anext__()
