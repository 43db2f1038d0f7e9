"""The MVCC manager, alone and fed by a WAL."""

from __future__ import annotations

from streamwal.adaptors.memory import MemoryMessageId
from streamwal.wal import ImmutableMessage, MessageType, MutableMessage, MVCCManager, VChannelMVCC
from tests.wal.testkit import OpenOwner, fast_config, wait_until


def _msg(
    time_tick: int, vchannel: str, msg_type: MessageType | str = MessageType.INSERT
) -> ImmutableMessage:
    return (
        MutableMessage(msg_type, vchannel=vchannel)
        .stamped(time_tick, MemoryMessageId(0), 1)
        .into_immutable(MemoryMessageId(time_tick))
    )


def test_starts_confirmed_at_the_first_time_tick() -> None:
    mvcc = MVCCManager(100)
    assert mvcc.get("v1") == VChannelMVCC(100, confirmed=True)
    assert mvcc.pchannel == VChannelMVCC(100, confirmed=True)


def test_a_message_moves_its_vchannel_unconfirmed() -> None:
    mvcc = MVCCManager(100)
    mvcc.update(_msg(101, "v1"))
    assert mvcc.get("v1") == VChannelMVCC(101, confirmed=False)
    assert mvcc.get("v2") == VChannelMVCC(100, confirmed=True)


def test_a_time_tick_confirms_every_vchannel() -> None:
    mvcc = MVCCManager(100)
    mvcc.update(_msg(101, "v1"))
    mvcc.update(_msg(102, "v2"))
    mvcc.update(_msg(103, "", MessageType.TIME_TICK))
    assert mvcc.get("v1") == mvcc.get("v2") == VChannelMVCC(103, confirmed=True)
    mvcc.sync(104)  # an in-memory time tick does the same
    assert mvcc.get("v1") == VChannelMVCC(104, confirmed=True)
    mvcc.sync(90)  # an older one changes nothing
    assert mvcc.get("v1") == VChannelMVCC(104, confirmed=True)


def test_a_message_for_every_vchannel_applies_to_all() -> None:
    mvcc = MVCCManager(100)
    mvcc.update(_msg(101, "v1"))
    mvcc.update(_msg(102, "", MessageType.FLUSH))
    assert mvcc.get("v1") == mvcc.get("v9") == VChannelMVCC(102, confirmed=False)
    mvcc.update(_msg(103, "v1"))
    assert mvcc.get("v1") == VChannelMVCC(103, confirmed=False)
    assert mvcc.get("v9") == VChannelMVCC(102, confirmed=False)


async def test_the_wal_keeps_mvcc_in_step(open_owner: OpenOwner) -> None:
    wal = await open_owner(config=fast_config(time_tick_interval=0.005))
    result = await wal.append(MutableMessage(MessageType.INSERT, b"x", vchannel="v1"))
    state = wal.mvcc.get("v1")
    assert state.time_tick >= result.time_tick
    await wait_until(lambda: wal.mvcc.get("v1").time_tick > result.time_tick)
    assert wal.mvcc.get("v1").confirmed
