"""The term an owner opens a channel under (Milvus's ``PChannelInfo.Term``): the
library takes it and keeps it on the WAL; refusing a stale one is the opener's
(:mod:`streamwal.node.terms`)."""

from __future__ import annotations

import pytest

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.errors import InvalidInputError
from streamwal.wal import open_wal
from tests.wal.testkit import BatchAllocator, CounterTSO, RecordingOpener, fast_config


async def test_the_wal_keeps_the_term_it_was_opened_under(
    store: MemoryLogStore, tso: CounterTSO, channel: str
) -> None:
    untermed = await open_wal(RecordingOpener(store), channel, BatchAllocator(tso), 1)
    try:
        assert untermed.term == 0
    finally:
        await untermed.close()
    wal = await open_wal(
        RecordingOpener(store), channel, BatchAllocator(tso), 2, fast_config(), term=7
    )
    try:
        assert wal.term == 7
        assert wal.params.channel.term == 7  # what the interceptors see
    finally:
        await wal.close()


@pytest.mark.parametrize("term", [-1, True, 1.5, "3"])
async def test_a_term_that_is_not_a_whole_number_is_refused_before_the_open(
    store: MemoryLogStore, tso: CounterTSO, channel: str, term: object
) -> None:
    with pytest.raises(InvalidInputError, match="term"):
        await open_wal(
            RecordingOpener(store),
            channel,
            BatchAllocator(tso),
            1,
            term=term,  # type: ignore[arg-type]
        )
    assert store.entries(channel) == []  # nothing written: no fence, no first time tick
