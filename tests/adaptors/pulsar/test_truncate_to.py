"""Truncating to a message id (inclusive) on the shared broker, through the library.

That broker keeps everything, so a truncation moves the truncation point and the
WAL's cursor there; what a read sees is what is tested: ``all`` starts right after
the id, a read from a truncated id is refused, a read after the id works, and the
slowest checkpoint holds the truncation back (the answer says where it stopped).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import InvalidInputError, TruncatedError
from streamwal.tso import EtcdConfig, InProcessTSO, TsoConfig
from streamwal.wal import WAL, MessageType, MutableMessage, open_wal
from streamwal.wal.backend import DeliveryPolicy
from streamwal.wal.initializing import open_read_only
from streamwal.wal.message_id import MessageId
from streamwal.wal.scanner import Scanner
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration


@pytest.fixture
async def owner(
    stack: StackInfo, unique: str, etcd_prefix: Callable[[str], str]
) -> AsyncIterator[tuple[WAL, PulsarOpener]]:
    pulsar = PulsarConfig(service_url=stack.pulsar_url)
    tso_config = TsoConfig(etcd=EtcdConfig((stack.etcd_endpoint,)), key_prefix=etcd_prefix("tt"))
    channel = f"trunc-to-{unique}"
    try:
        async with InProcessTSO(tso_config) as tso, PulsarOpener(pulsar) as opener:
            wal = await open_wal(opener, channel, tso.allocator(), 1)
            try:
                yield wal, opener
            finally:
                await wal.close()
    finally:
        topic = PulsarAdmin.topic_path(pulsar.topic(channel))
        await PulsarAdmin(stack.pulsar_admin_url).delete(f"{topic}?force=true")


async def _append(wal: WAL, count: int) -> list[MessageId]:
    """``count`` inserts, one entry each (awaited one by one)."""
    ids = []
    for i in range(count):
        result = await wal.append(MutableMessage(MessageType.INSERT, f"m-{i}".encode()))
        ids.append(result.message_id)
    return ids


async def _inserts(scanner: Scanner, count: int) -> list[MessageId]:
    """The ids of the next ``count`` inserts ``scanner`` delivers (time ticks skipped)."""
    found: list[MessageId] = []
    try:
        async for msg in scanner:
            if msg.type is MessageType.INSERT:
                found.append(msg.message_id)
                if len(found) == count:
                    return found
    finally:
        await scanner.close()
    return found


async def test_truncate_to_an_id_in_the_middle(owner: tuple[WAL, PulsarOpener]) -> None:
    wal, opener = owner
    ids = await _append(wal, 10)
    middle = ids[4]

    assert await wal.truncate_to(middle) == middle
    state = await wal.retention()
    assert state.truncated_through == middle

    # everything up to and including the id is gone for every read path
    assert await _inserts(await wal.read(DeliveryPolicy.all()), 5) == ids[5:]
    for asked in (ids[0], ids[3], middle):
        with pytest.raises(TruncatedError) as refused:
            await wal.read(DeliveryPolicy.start_from(asked))
        assert refused.value.earliest == middle and refused.value.through
        assert f"truncated through {middle}" in str(refused.value)
    with pytest.raises(TruncatedError):
        await wal.read(DeliveryPolicy.start_after(ids[3]))
    assert await _inserts(await wal.read(DeliveryPolicy.start_after(middle)), 5) == ids[5:]
    assert await _inserts(await wal.read(DeliveryPolicy.start_from(ids[5])), 5) == ids[5:]

    # a reader that does not own the channel sees the same
    reader = await open_read_only(opener, wal.channel)
    try:
        assert await _inserts(await reader.read(DeliveryPolicy.all()), 5) == ids[5:]
    finally:
        await reader.close()

    # a second truncate to an id already truncated moves nothing; the retention
    # rule never undoes it
    assert await wal.truncate_to(ids[2]) is None
    assert await wal.truncate(retention=3600) is None
    assert (await wal.retention()).truncated_through == middle

    # a checkpoint may be at the truncation id (a resume reads after it), not before
    await wal.checkpoint("at-the-id", middle, 1)
    with pytest.raises(TruncatedError):
        await wal.checkpoint("before-it", ids[3], 1)


async def test_a_checkpoint_behind_clamps_the_truncation(owner: tuple[WAL, PulsarOpener]) -> None:
    wal, _ = owner
    ids = await _append(wal, 10)
    await wal.checkpoint("indexer", ids[3], 1)

    # asked through ids[7]: the consumer still needs ids[3] (a resume reads it first)
    used = await wal.truncate_to(ids[7])
    assert used is not None and ids[2] <= used < ids[3]
    assert (await wal.retention()).truncated_through == used
    with pytest.raises(TruncatedError):
        await wal.read(DeliveryPolicy.start_from(ids[2]))
    resumed = await _inserts(await wal.read(DeliveryPolicy.after_checkpoint("indexer")), 6)
    assert resumed == ids[4:]
    assert (await _inserts(await wal.read(DeliveryPolicy.all()), 1)) == [ids[3]]

    # once the consumer moves on, the same call goes further
    await wal.checkpoint("indexer", ids[9], 1)
    assert await wal.truncate_to(ids[7]) == ids[7]
    assert await _inserts(await wal.read(DeliveryPolicy.all()), 2) == ids[8:]


async def test_bad_ids_are_refused_and_truncate_nothing(
    owner: tuple[WAL, PulsarOpener],
    stack: StackInfo,
    unique: str,
    etcd_prefix: Callable[[str], str],
) -> None:
    wal, opener = owner
    ids = await _append(wal, 5)
    last = ids[-1]
    assert isinstance(last, PulsarMessageId)

    # an id of another channel (its ledgers are not this topic's)
    other_name = f"trunc-other-{unique}"
    tso_config = TsoConfig(etcd=EtcdConfig((stack.etcd_endpoint,)), key_prefix=etcd_prefix("to"))
    try:
        async with InProcessTSO(tso_config) as tso:
            other = await open_wal(opener, other_name, tso.allocator(), 2)
            foreign = (await other.append(MutableMessage(MessageType.INSERT, b"x"))).message_id
            await other.close()
        with pytest.raises(InvalidInputError, match="not in channel"):
            await wal.truncate_to(foreign)
    finally:
        topic = PulsarAdmin.topic_path(opener.config.topic(other_name))
        await PulsarAdmin(stack.pulsar_admin_url).delete(f"{topic}?force=true")

    past_end = [
        PulsarMessageId(last.ledger, last.entry + 1000),
        PulsarMessageId(last.ledger + 10_000_000, 0),
    ]
    for bad in past_end:
        with pytest.raises(InvalidInputError):
            await wal.truncate_to(bad)
    with pytest.raises(InvalidInputError):
        await wal.truncate_to(b"\x00\x01")  # type: ignore[arg-type]

    state = await wal.retention()
    assert state.truncated_through is None and state.truncated_before is None
    assert await _inserts(await wal.read(DeliveryPolicy.all()), 5) == ids
