"""The WAL contract, one suite on every target (``conftest.target``): the in-process
backend, the library over Pulsar, and node processes over gRPC.

What Milvus's ``walimpls`` framework asks of a WAL, in this project's terms: messages
come back as they were sent; concurrent appends land once each, in an order their
time ticks follow; owners follow one another on a channel (each fencing the one
before) and every earlier owner's messages stay readable; the four delivery policies
start where they say, from any kind of id; a read-only reader sees what an owner's
reader sees, through takeovers; truncation refuses reads of what it dropped.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable

import pytest

from streamwal.errors import ChannelFencedError, TruncatedError
from tests.conformance.targets import Acked, Owner, Policy, Seen, Target

#: what a write to a fenced owner is refused with on every target: fenced is forever
#: and said every time (a node keeps the fenced channel until it is removed)
REFUSED_AFTER_FENCE = ChannelFencedError


async def take(messages: AsyncIterator[Seen], count: int, timeout: float = 30.0) -> list[Seen]:
    """The next ``count`` messages (time ticks included)."""

    async def run() -> list[Seen]:
        out: list[Seen] = []
        while len(out) < count:
            out.append(await anext(messages))
        return out

    return await asyncio.wait_for(run(), timeout)


async def take_until(
    messages: AsyncIterator[Seen], last: bytes, timeout: float = 30.0
) -> list[Seen]:
    """Every message up to and including the one with id ``last``."""

    async def run() -> list[Seen]:
        out: list[Seen] = []
        while not out or out[-1].id != last:
            out.append(await anext(messages))
        return out

    return await asyncio.wait_for(run(), timeout)


async def read_until(
    target: Target, channel: str, last: bytes, *, node: int, read_only: bool
) -> list[Seen]:
    async with target.read(channel, Policy.all(), node=node, read_only=read_only) as messages:
        return await take_until(messages, last)


async def refused_as_truncated(
    target: Target, channel: str, policy: Policy, node: int, read_only: bool
) -> None:
    """A read of ``channel`` from ``policy`` on ``node`` is refused: where it starts was
    truncated."""
    with pytest.raises(TruncatedError):
        async with target.read(channel, policy, node=node, read_only=read_only) as messages:
            await take(messages, 1)


def data(messages: list[Seen]) -> list[Seen]:
    """What callers appended (the WAL's own records left out)."""
    return [m for m in messages if not m.wal_record]


def ids(messages: list[Seen]) -> list[bytes]:
    return [m.id for m in messages]


def assert_log_order(target: Target, messages: list[Seen]) -> None:
    """Ids and time ticks strictly increase along the delivery order."""
    orders = [target.log_order(m.id) for m in messages]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    ticks = [m.time_tick for m in messages]
    assert all(b > a for a, b in itertools.pairwise(ticks)), ticks


# ---- messages pass verbatim ------------------------------------------------------------

ROUND_TRIP = [
    (b"plain", {"k": "v"}),
    (b"", {}),
    (bytes(range(256)), {"binary": "yes"}),
    (b"x" * 100_000, {"size": "100k"}),
    ("ünï €".encode(), {"ключ": "значение", "emoji": "✓", "spaces in key": "a b"}),
]


async def test_payload_and_properties_come_back_as_they_were_sent(target: Target) -> None:
    channel = target.channel("verbatim")
    owner = await target.open(channel, 0)
    acked = [await owner.append(payload, properties) for payload, properties in ROUND_TRIP]
    for node, read_only in ((0, False), (1, True)):
        got = data(await read_until(target, channel, acked[-1].id, node=node, read_only=read_only))
        assert [(m.payload, m.properties, m.type) for m in got] == [
            (payload, properties, "Insert") for payload, properties in ROUND_TRIP
        ]
        assert [(m.id, m.time_tick) for m in got] == [(a.id, a.time_tick) for a in acked]
    await owner.close()


async def test_property_keys_starting_with_an_underscore_and_empty_values_pass(
    target: Target,
) -> None:
    """Milvus's own keys (``_t``, ``_v``, ``_tt``, ``_vc``, ``_lc``, ``_h``, ...)."""
    channel = target.channel("underscore")
    owner = await target.open(channel, 0)
    properties = {"_t": "Insert", "_v": "2", "_tt": "1", "_lc": "", "_h": "", "empty": ""}
    acked = await owner.append(b"milvus", properties)
    got = data(await read_until(target, channel, acked.id, node=1, read_only=True))
    assert [(m.payload, m.properties) for m in got] == [(b"milvus", properties)]
    await owner.close()


async def test_any_caller_type_comes_back_as_it_was_sent(target: Target) -> None:
    """Milvus's types, ``TimeTick`` included (its framework appends its own)."""
    channel = target.channel("types")
    owner = await target.open(channel, 0)
    types = ["SchemaChange", "TimeTick", "42", "Insert"]
    acked = [await owner.append(t.encode(), {}, type=t) for t in types]
    got = await read_until(target, channel, acked[-1].id, node=1, read_only=True)
    mine = [m for m in got if m.id in {a.id for a in acked}]
    assert [(m.type, m.payload) for m in mine] == [(t, t.encode()) for t in types]
    await owner.close()


# ---- concurrent appends ----------------------------------------------------------------


async def test_concurrent_appends_land_once_each_in_time_tick_order(target: Target) -> None:
    channel = target.channel("concurrent")
    owner = await target.open(channel, 0)
    tasks, per_task = 4, 15

    async def appender(task: int) -> list[Acked]:
        return [await owner.append(f"t{task}-{i}".encode()) for i in range(per_task)]

    acked = await asyncio.gather(*(appender(t) for t in range(tasks)))
    every = [a for mine in acked for a in mine]
    assert len({a.id for a in every}) == tasks * per_task
    last = max(every, key=lambda a: target.log_order(a.id))
    for node, read_only in ((0, False), (1, True)):
        got = await read_until(target, channel, last.id, node=node, read_only=read_only)
        assert_log_order(target, got)
        delivered = data(got)
        assert sorted(ids(delivered)) == sorted(a.id for a in every)  # each once
        by_id = {m.id: m for m in delivered}
        for task, mine in enumerate(acked):
            # each task's appends, awaited one after the other, in its order in the log
            assert [by_id[a.id].payload for a in mine] == [
                f"t{task}-{i}".encode() for i in range(per_task)
            ]
            assert [by_id[a.id].time_tick for a in mine] == [a.time_tick for a in mine]
    await owner.close()


# ---- owners in sequence ----------------------------------------------------------------


async def test_three_owners_in_turn_and_every_earlier_owners_messages_are_read(
    target: Target,
) -> None:
    """Open, append, then the next owner: by a fence (the first one), by a close (the
    second one); all of it read back through the last owner and read-only."""
    channel = target.channel("owners")
    nodes = [0, 1, 0]
    owners: list[Owner] = []
    acked: list[Acked] = []
    for term, node in enumerate(nodes):
        owner = await target.open(channel, node)
        if term == 1:
            with pytest.raises(REFUSED_AFTER_FENCE):
                await owners[0].append(b"after-the-fence")
            await owners[0].close()
        if term == 2:
            assert owner.first_time_tick > owners[1].first_time_tick
        owners.append(owner)
        acked += [await owner.append(f"term{term}-{i}".encode()) for i in range(3)]
        if term == 1:
            await owner.close()
    assert owners[1].first_time_tick > owners[0].first_time_tick
    last = acked[-1].id
    through_owner = await read_until(target, channel, last, node=nodes[-1], read_only=False)
    read_only = await read_until(target, channel, last, node=1, read_only=True)
    assert ids(read_only) == ids(through_owner)
    assert_log_order(target, through_owner)
    assert [m.payload for m in data(through_owner)] == [
        f"term{t}-{i}".encode() for t in range(3) for i in range(3)
    ]
    firsts = [ids(through_owner).index(o.first_id) for o in owners]
    assert firsts == sorted(firsts)
    for term, owner in enumerate(owners):
        first = through_owner[firsts[term]]
        assert first.wal_record and first.time_tick == owner.first_time_tick
        end = firsts[term + 1] if term + 1 < len(owners) else len(through_owner)
        written = through_owner[firsts[term] : end]
        assert {m.source for m in written} == {owner.node + 1}  # each owner's own
        assert [m.payload for m in data(written)] == [f"term{term}-{i}".encode() for i in range(3)]
    await owners[-1].close()


async def test_a_fenced_owner_is_told_so_on_every_later_write(target: Target) -> None:
    channel = target.channel("fenced")
    first = await target.open(channel, 0)
    await first.append(b"before")
    second = await target.open(channel, 1)
    for attempt in range(3):
        with pytest.raises(ChannelFencedError):
            await first.append(f"late-{attempt}".encode())
    await second.append(b"the new owner writes")
    await second.close()
    await first.close()


# ---- delivery policies -----------------------------------------------------------------


async def test_every_policy_from_every_kind_of_id(target: Target) -> None:
    """``all``, ``latest``, from an id (inclusive) and after one (exclusive), from an
    owner's first time tick, a caller's message, an earlier owner's message and the
    last one; through the owner and read-only, the same messages."""
    channel = target.channel("policies")
    first = await target.open(channel, 0)
    acked = [await first.append(f"a-{i}".encode()) for i in range(2)]
    second = await target.open(channel, 1)
    acked += [await second.append(f"b-{i}".encode()) for i in range(2)]
    full = await read_until(target, channel, acked[-1].id, node=1, read_only=False)
    kinds = {
        "first owner's first time tick": first.first_id,
        "an earlier owner's message": acked[0].id,
        "an earlier owner's last message": acked[1].id,
        "this owner's first time tick": second.first_id,
        "a message": acked[2].id,
        "the last message": acked[3].id,
    }
    for what, position in kinds.items():
        at = ids(full).index(position)
        for node, read_only in ((1, False), (0, True)):
            how = f"{what}, {'read-only on node 0' if read_only else 'the owner'}"
            async with target.read(
                channel, Policy.start_from(position), node=node, read_only=read_only
            ) as messages:
                got = await take(messages, len(full) - at)
            assert ids(got) == ids(full[at:]), f"from {how}"
            if at + 1 < len(full):
                async with target.read(
                    channel, Policy.start_after(position), node=node, read_only=read_only
                ) as messages:
                    got = await take(messages, len(full) - at - 1)
                assert ids(got) == ids(full[at + 1 :]), f"after {how}"
    for node, read_only in ((1, False), (0, True)):
        async with target.read(channel, Policy.all(), node=node, read_only=read_only) as messages:
            assert ids(await take(messages, len(full))) == ids(full)
    # latest: only what is appended once the read is open (appended until one arrives:
    # when the read is open on the server side is not known here)
    for node, read_only in ((1, False), (0, True)):
        async with target.read(
            channel, Policy.latest(), node=node, read_only=read_only
        ) as messages:
            pending = asyncio.ensure_future(_next_data(messages))
            sent: list[Acked] = []
            while not pending.done() and len(sent) < 20:
                sent.append(await second.append(f"latest-{node}-{len(sent)}".encode()))
                await asyncio.wait([pending], timeout=1.0)
            arrived = await asyncio.wait_for(pending, 30)
            assert arrived.id in [a.id for a in sent], "latest delivered an older message"
            assert arrived.payload.startswith(f"latest-{node}-".encode())
    await second.close()
    await first.close()


async def _next_data(messages: AsyncIterator[Seen]) -> Seen:
    while True:
        m = await anext(messages)
        if not m.wal_record:
            return m


# ---- read-only readers during a takeover ---------------------------------------------


async def test_read_only_readers_see_the_owners_ids_and_order_through_a_takeover(
    target: Target,
) -> None:
    channel = target.channel("takeover")
    first = await target.open(channel, 0)
    before = [await first.append(f"a-{i}".encode()) for i in range(3)]
    seen: list[Seen] = []

    async def reader() -> None:
        async with target.read(channel, Policy.all(), node=1, read_only=True) as messages:
            async for m in messages:
                seen.append(m)

    reading = asyncio.create_task(reader())
    try:
        await _until(lambda: before[-1].id in ids(seen))
        before.append(await first.append(b"a-while-read"))  # the reader fenced nobody
        second = await target.open(channel, 1)
        with pytest.raises(REFUSED_AFTER_FENCE):
            await first.append(b"a-late")
        after = [await second.append(f"b-{i}".encode()) for i in range(3)]
        # a second read-only reader, started after the takeover, from an earlier
        # owner's message
        async with target.read(
            channel, Policy.start_after(before[0].id), node=0, read_only=True
        ) as messages:
            late_start = await take_until(messages, after[-1].id)
        await _until(lambda: after[-1].id in ids(seen))
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
    owners = await read_until(target, channel, after[-1].id, node=1, read_only=False)
    upto = ids(seen).index(after[-1].id) + 1
    assert ids(seen[:upto]) == ids(owners)
    assert [m.time_tick for m in seen[:upto]] == [m.time_tick for m in owners]
    assert ids(late_start) == ids(owners)[ids(owners).index(before[0].id) + 1 :]
    assert [m.payload for m in data(owners)] == [b"a-0", b"a-1", b"a-2", b"a-while-read"] + [
        f"b-{i}".encode() for i in range(3)
    ]
    await second.close()
    await first.close()


async def _until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


# ---- truncation ------------------------------------------------------------------------


async def test_truncation_refuses_reads_of_what_it_dropped(target: Target) -> None:
    """By retention, held back by a consumer's checkpoint: the checkpoint's message is
    kept, every one before it is truncated."""
    channel = target.channel("truncate")
    owner = await target.open(channel, 0)
    acked = [await owner.append(f"m-{i}".encode()) for i in range(5)]
    await owner.checkpoint("slowest", acked[2].id, acked[2].time_tick)
    await asyncio.sleep(0.05)  # every message is older than a window of 0 s
    assert await owner.truncate(0.0) is not None
    for node, read_only in ((0, False), (1, True)):
        await refused_as_truncated(target, channel, Policy.start_from(acked[1].id), node, read_only)
        async with target.read(
            channel, Policy.start_from(acked[2].id), node=node, read_only=read_only
        ) as messages:
            assert ids(await take(messages, 3)) == [a.id for a in acked[2:]]
    await owner.close()


async def test_truncate_to_an_id_is_inclusive_and_all_starts_after_it(target: Target) -> None:
    """Milvus's ``Truncate(id)``: the id and everything before it are discarded; ``all``
    starts at the first message kept, from the owner and from a read-only reader; a
    read from the id is refused, one after it is where the log goes on; a checkpoint
    behind clamps it to just before the checkpoint's message."""
    channel = target.channel("truncate-to")
    owner = await target.open(channel, 0)
    acked = [await owner.append(f"m-{i}".encode()) for i in range(8)]
    await owner.checkpoint("slowest", acked[2].id, acked[2].time_tick)
    clamped = await owner.truncate_to(acked[5].id)
    assert clamped is not None
    assert target.log_order(acked[1].id) <= target.log_order(clamped)
    assert target.log_order(clamped) < target.log_order(acked[2].id)

    await owner.checkpoint("slowest", acked[7].id, acked[7].time_tick)
    assert await owner.truncate_to(acked[5].id) == acked[5].id
    assert await owner.truncate_to(acked[3].id) is None  # truncated already
    for node, read_only in ((0, False), (1, True)):
        async with target.read(channel, Policy.all(), node=node, read_only=read_only) as messages:
            first = [m for m in await take_until(messages, acked[7].id) if not m.wal_record]
            assert ids(first) == [a.id for a in acked[6:]]
        await refused_as_truncated(target, channel, Policy.start_from(acked[5].id), node, read_only)
        async with target.read(
            channel, Policy.start_after(acked[5].id), node=node, read_only=read_only
        ) as messages:
            after = [m for m in await take_until(messages, acked[7].id) if not m.wal_record]
            assert ids(after) == [a.id for a in acked[6:]]
    await owner.close()
