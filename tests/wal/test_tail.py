"""``read_log``: the owner's bounded reads of its own channel's log."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

import pytest

from streamwal.adaptors.memory import MemoryBackendWAL, MemoryLogStore, MemoryOpener
from streamwal.wal import DeliveryPolicy, ImmutableMessage, MessageType, MutableMessage
from streamwal.wal.backend import AccessMode
from streamwal.wal.tail import read_log
from tests.wal.testkit import OpenOwner, ProxyBackend


async def _read(
    store: MemoryLogStore,
    channel: str,
    open_owner: OpenOwner,
    *,
    idle: float,
    bound: float,
    close_delay: float = 0.0,
) -> AsyncGenerator[ImmutableMessage, None]:
    """A read of ``channel`` after an owner wrote a, b and c into it; its reader takes
    ``close_delay`` seconds to close."""
    wal = await open_owner(node_id=1)
    for payload in (b"a", b"b", b"c"):
        await wal.append(MutableMessage(MessageType.INSERT, payload, vchannel="v1"))
    await wal.close()
    opener = MemoryOpener(store)
    inner = await opener.open(channel, AccessMode.READ_ONLY)
    assert isinstance(inner, MemoryBackendWAL)
    backend = ProxyBackend(inner)
    backend.close_delay = close_delay
    return read_log(
        backend, opener.message_id_from_bytes, DeliveryPolicy.all(), idle=idle, bound=bound
    )


async def test_a_read_ends_at_the_end_of_the_log(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    entries = await _read(store, channel, open_owner, idle=0.05, bound=5.0)
    async with contextlib.aclosing(entries):
        payloads = [m.payload async for m in entries if m.type is MessageType.INSERT]
    assert payloads == [b"a", b"b", b"c"]


async def test_a_read_past_its_bound_raises_timeout_while_waiting_for_an_entry(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    entries = await _read(store, channel, open_owner, idle=30.0, bound=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with contextlib.aclosing(entries):
            async for _ in entries:
                pass
    assert loop.time() - started < 5.0


async def test_a_bound_that_passes_while_the_consumer_waits_does_not_cancel_the_consumer(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    """The consumer's own wait between two entries finishes; the read then ends with
    ``TimeoutError``. A deadline held across the generator's ``yield`` cancelled that
    wait instead, a ``CancelledError`` the consumer never asked for."""
    entries = await _read(store, channel, open_owner, idle=1.0, bound=0.5)
    waited = False
    with pytest.raises(TimeoutError):
        async with contextlib.aclosing(entries):
            async for _ in entries:
                await asyncio.sleep(1.0)
                waited = True
    assert waited
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_an_entry_found_before_the_bound_is_kept_however_long_the_close_takes(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    """A look-up that found what it looked for closes its read; a bound running out
    during that close used to turn the find into a ``TimeoutError``."""
    entries = await _read(store, channel, open_owner, idle=1.0, bound=0.3, close_delay=0.6)
    found = None
    async with contextlib.aclosing(entries):
        async for msg in entries:
            if msg.type is MessageType.INSERT:
                found = msg.payload
                break
    assert found == b"a"
