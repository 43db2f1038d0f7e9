"""What every role of a Pulsar channel shares: its state, its logger, the open check.

A channel (:class:`~streamwal.adaptors.pulsar.channel.PulsarBackendWAL`) is made of
roles, one module each: taking the topic over (:mod:`.takeover`), sending with
segment receipts (:mod:`.sending`), the read-back guard (:mod:`.readback`) and readers
(:mod:`.readers`). They share the state set up here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.receipts import ReceiptQueue
from streamwal.adaptors.pulsar.retention import RetentionDelegate, TopicRetention
from streamwal.adaptors.pulsar.scanner import PulsarScanner
from streamwal.adaptors.pulsar.segments import Edge, Prepared, Segment, Single
from streamwal.errors import ChannelFencedError, ClosedError, UnknownPositionError
from streamwal.wal.backend import AccessMode

__all__ = ["ChannelState", "log"]

#: one logger for every role of a channel
log = logging.getLogger("streamwal.adaptors.pulsar.channel")


class ChannelState(RetentionDelegate):
    """The state of one channel, shared by its roles; see the module."""

    def __init__(
        self,
        client: Any,
        config: PulsarConfig,
        channel: str,
        mode: AccessMode,
        before_first_write: Callable[[], Awaitable[None]],
        *,
        prepare_topic: Callable[[str, str, Awaitable[None] | None], Awaitable[None]],
        retention: TopicRetention | None = None,
        on_close: Callable[[Any], None] = lambda _: None,
        writer_client: Any = None,
    ) -> None:
        self._client = client
        #: the producers' own client (adaptors.pulsar.opener says why), closed last
        self._writer_client = writer_client
        self._config = config
        self._channel = channel
        self._topic = config.topic(channel)
        self._mode = mode
        self._before_first_write = before_first_write
        self._prepare_topic = prepare_topic
        self._retention = retention or TopicRetention(
            None, self._topic, channel, config.cursor_subscription
        )
        self._on_close = on_close
        self._producer: Any = None
        self._last_landed: PulsarMessageId | None = None
        self._fenced: ChannelFencedError | None = None
        #: closed while a read-back ran: the log after its first edge is unverified
        self._unverified: UnknownPositionError | None = None
        self._closed = False
        self._lock = asyncio.Lock()
        self._scanners: set[PulsarScanner] = set()
        #: the latest append, sent when the next one comes or the iteration ends
        self._held: Prepared | None = None
        #: the segment being sent (its first edge is out, its last is not yet)
        self._segment: Segment | None = None
        self._segment_bytes = 0
        #: reads placing the middle of a segment that was cut more than once
        self._readbacks: set[asyncio.Task[list[PulsarMessageId] | None]] = set()
        #: receipts waiting for a read-back to finish (None: none is running)
        self._deferred: deque[Callable[[], None]] | None = None
        self._receipts: ReceiptQueue[Single | Edge] = ReceiptQueue(self._on_receipt)
        #: appends handed to the client and not answered yet (pulsar.max_pending_messages)
        self._in_flight = 0
        #: producer creations given up on, closing what they create (.takeover)
        self._reapers: set[asyncio.Future[None]] = set()

    @property
    def channel(self) -> str:
        return self._channel

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def access_mode(self) -> AccessMode:
        return self._mode

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"channel {self._channel!r} is closed")

    @property
    def is_fenced(self) -> bool:
        return self._fenced is not None

    def _on_receipt(self, token: Single | Edge, result: Any, message_id: Any) -> None:
        """A send receipt (:class:`~streamwal.adaptors.pulsar.sending.Sending` answers it)."""
        raise NotImplementedError
