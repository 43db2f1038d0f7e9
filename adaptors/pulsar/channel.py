"""One channel (= one Pulsar topic) opened by a node.

The channel is composed of parts, one module each, as a producer is handed its
accumulator and sender: :mod:`.takeover` (the fence, then the writing producer),
:mod:`.sending` (appends in call order with segment receipts), :mod:`.readback`
(placing appends whose receipts do not say where they landed), :mod:`.fencewatch`
(a fence the client does not report), :mod:`.readers`
(scanners per delivery policy), each handed :mod:`.state`, what they share; and
:mod:`.retention` (checkpoints, truncation) of the topic. This class only builds them
and routes the backend contract's calls to them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from streamwal.adaptors.pulsar.clients import close_client
from streamwal.adaptors.pulsar.closing import close_quietly
from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.adaptors.pulsar.fencewatch import FenceWatch
from streamwal.adaptors.pulsar.readback import ReadBack
from streamwal.adaptors.pulsar.readers import Readers
from streamwal.adaptors.pulsar.retention import TopicRetention
from streamwal.adaptors.pulsar.scanner import PulsarScanner
from streamwal.adaptors.pulsar.sending import Sender
from streamwal.adaptors.pulsar.state import ChannelState
from streamwal.adaptors.pulsar.takeover import BeforeFirstWrite, PrepareTopic, Takeover
from streamwal.errors import QuotaExceededError
from streamwal.wal.backend import AccessMode, DeliveryPolicy
from streamwal.wal.chunking import MIN_ENTRY_BYTES, entry_budget
from streamwal.wal.message_id import MessageId
from streamwal.wal.retention_contract import Checkpoint, RetentionState, TruncationPoint

__all__ = ["ENVELOPE_RESERVE", "PulsarBackendWAL"]

#: what an entry's Pulsar envelope may take beyond payload and properties: the
#: message metadata (producer name, sequence id, publish time, chunk-free batch
#: wrapper of one message) is a few hundred bytes; kept generous, as a broker limit
#: counts the whole frame
ENVELOPE_RESERVE = 64 * 1024


class PulsarBackendWAL:
    """A topic opened read-write (exclusive producer on demand) or read-only."""

    #: the largest entry the broker takes (the opener's reading of its
    #: ``maxMessageSize``); ``None``: the configured ``max_message_size``
    message_size_limit: Callable[[], int] | None = None
    #: what :attr:`max_entry_bytes` never goes below (:func:`entry_budget`'s floor),
    #: so the chunking layer need not ask for the live limit of a smaller append
    min_entry_bytes = MIN_ENTRY_BYTES

    def __init__(
        self,
        client: Any,
        config: PulsarConfig,
        channel: str,
        mode: AccessMode,
        before_first_write: BeforeFirstWrite,
        *,
        prepare_topic: PrepareTopic,
        retention: TopicRetention | None = None,
        on_close: Callable[[PulsarBackendWAL], None] = lambda _: None,
        writer_client: Any = None,
        give_back_writer_client: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self._state = state = ChannelState(
            client, config, channel, mode, writer_client=writer_client
        )
        self.channel: Final = channel
        self.topic: Final = state.topic
        self.access_mode: Final = mode
        self._retention = retention or TopicRetention(
            None, state.topic, channel, config.cursor_subscription
        )
        self._on_close = on_close
        self._give_back_writer_client = give_back_writer_client
        self._closing: asyncio.Future[None] | None = None
        self._readback = ReadBack(state)
        self._watch = FenceWatch(state, self._readback)
        self._sender = Sender(state, self._readback, self._watch.arm)
        self._takeover = Takeover(
            state, before_first_write, prepare_topic, self._retention.explain_quota
        )
        self._readers = Readers(state, self._retention)
        self.submit = self._sender.submit
        """Hand one append to the log now; ``done`` answers it (the contract's
        ``submit``; a bound attribute: one frame less per append)."""

    @property
    def is_fenced(self) -> bool:
        return self._state.fenced is not None

    @property
    def max_entry_bytes(self) -> int:
        """Payload plus properties one entry may carry: the broker's limit less
        :data:`ENVELOPE_RESERVE` (what the WAL chunks above, streamwal.wal.chunking)."""
        limit = self.message_size_limit
        return entry_budget(
            self._state.config.max_message_size if limit is None else limit(),
            ENVELOPE_RESERVE,
        )

    def write_packs(self) -> int:
        """The WAL writes packs of several messages per entry (log format v2): the
        producer, made from now on, sends each append as an entry of its own (no client
        batching), since a pack's messages take the batch index of their entry's id.
        Returns the most bytes a pack may take (what always fits one entry, and within
        ``max_message_size``, which this backend refuses past); 0 if a batching producer
        already exists (it keeps batching: no packs)."""
        if self._state.producer is not None and self._state.batching:
            return 0
        self._state.batching = False
        return max(min(self.min_entry_bytes, self._state.config.max_message_size - 1024), 0)

    async def ensure_writable(self) -> None:
        await self._takeover.ensure_writable()

    async def read(self, policy: DeliveryPolicy) -> PulsarScanner:
        return await self._readers.read(policy)

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        await self._retention.save_checkpoint(checkpoint)

    async def remove_checkpoint(self, consumer: str) -> None:
        await self._retention.remove_checkpoint(consumer)

    async def retention_state(self) -> RetentionState:
        return await self._retention.retention_state()

    async def truncation(self) -> TruncationPoint:
        return await self._retention.truncation()

    async def position_at(self, publish_time_ms: int) -> MessageId | None:
        return await self._retention.position_at(publish_time_ms)

    async def truncate(self, before: MessageId) -> None:
        await self._retention.truncate(before)

    async def truncate_through(self, through: MessageId) -> None:
        await self._retention.truncate_through(through)

    async def locate(self, message_id: MessageId) -> None:
        await self._readers.locate(message_id)

    async def message_before(self, message_id: MessageId) -> MessageId | None:
        return await self._readers.message_before(message_id)

    async def explain_quota(self, error: QuotaExceededError) -> QuotaExceededError:
        return await self._retention.explain_quota(error)

    async def close(self) -> None:
        """Close once; a second call (the opener's, at its own close) waits for the
        first, and a cancelled caller leaves the close running to its end, so the
        channel's writer client is always given back."""
        if self._closing is None:
            # at once, in the caller's step: every later call is refused, the accepted
            # appends reach the client (which flushes them), and the reads placing
            # appends stop, answering what they held back
            self._state.closed = True
            self._sender.end_iteration()
            self._watch.close()
            self._readback.cancel()
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        state = self._state
        timeout = state.config.operation_timeout_s
        try:
            await self._takeover.settle()
            await self._readers.close()
            await self._watch.aclose()
            await self._readback.close()
            producer, state.producer = state.producer, None
            if producer is not None:  # fenced or unreachable: nothing left to flush
                await close_quietly(producer, timeout)
        finally:
            await self._let_go_of_writer_client(timeout)
            self._on_close(self)

    async def _let_go_of_writer_client(self, timeout: float) -> None:
        client = self._state.writer_client  # kept: a late creation must not fall back
        if client is None:
            return
        if self._give_back_writer_client is not None:
            await self._give_back_writer_client(client)  # shared: closed by its last user
        else:
            await close_client(client, timeout)
