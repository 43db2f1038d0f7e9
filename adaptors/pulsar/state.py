"""What the parts of one Pulsar channel share: its topic, its producer, its fence, and
the interleaving guard that decides whether a landed append may be acknowledged.

A channel (:class:`~streamwal.adaptors.pulsar.channel.PulsarBackendWAL`) is composed of
parts, one module each, every one handed this state: taking the topic over
(:mod:`.takeover`), sending with segment receipts (:mod:`.sending`), placing appends
whose receipts do not say where they landed (:mod:`.readback`) and readers
(:mod:`.readers`). The guard lives here, beside the fence it sets, because both the
sender and the read-back answer appends through it.

Interleaving guard: within one ledger, the entries of an exclusive producer are
consecutive. A receipt whose entry is further on than the next one means another
producer wrote in between: this producer was fenced and let back in (kept as a second
line of defence behind the takeover's fence). Such an append is persisted after a newer
owner's messages, so it is answered as fenced (never acknowledged), and so is every
later one.
"""

from __future__ import annotations

import logging
from typing import Any

import _pulsar
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.adaptors.pulsar.errors import FENCING_RESULTS, after_send, translate
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.errors import (
    ChannelFencedError,
    ClosedError,
    StreamwalError,
    UnknownPositionError,
    WriteOutcome,
)
from streamwal.wal.backend import AccessMode, AppendCallback

__all__ = ["ChannelState", "log"]

#: one logger for every part of a channel
log = logging.getLogger("streamwal.adaptors.pulsar.channel")


class ChannelState:
    """The state of one channel, shared by its parts; see the module."""

    def __init__(
        self,
        client: Any,
        config: PulsarConfig,
        channel: str,
        mode: AccessMode,
        *,
        writer_client: Any = None,
    ) -> None:
        self.client = client
        #: the producers' client (adaptors.pulsar.clients), given back at close
        self.writer_client = writer_client
        self.config = config
        #: whether the writing producer batches in the client: ``config.batching`` until
        #: the WAL writes packs (each send must then be an entry of its own)
        self.batching = config.batching
        self.channel = channel
        self.topic = config.topic(channel)
        self.mode = mode
        self.producer: Any = None
        #: the writing producer's name, read once it is created (the client may rewrite
        #: its copy on a reconnect, on its own thread)
        self.writer_name: str | None = None
        #: this owner was fenced: set once, every later append fails with it
        self.fenced: ChannelFencedError | None = None
        #: a writer given up on before its first entry (.fencewatch): what its appends
        #: in flight fail with when it is closed, instead of a fence
        self.abandoned: StreamwalError | None = None
        #: the fence came while nothing this owner had in flight could land any more,
        #: and the log holds none of it: in-flight appends failing now were not written
        self.in_flight_unwritten = False
        #: closed while a read-back ran: the log after its first edge is unverified
        self.unverified: UnknownPositionError | None = None
        self.closed = False
        #: the last position this owner placed, where the guard's next check starts
        self.last_landed: PulsarMessageId | None = None
        #: the first position this owner placed (its first time tick): a message of
        #: another producer after it means a newer owner (.fencewatch)
        self.first_landed: PulsarMessageId | None = None
        #: receipt callbacks the sender handled (one held back by a read-back counts
        #: again when it runs): the fence watch's sign of progress
        self.receipts = 0
        #: appends handed to the client and not answered yet (pulsar.max_pending_messages)
        self.in_flight = 0

    def check_open(self) -> None:
        if self.closed:
            raise ClosedError(f"channel {self.channel!r} is closed")

    def check_landed(self, landed: PulsarMessageId) -> StreamwalError | None:
        """The interleaving guard (module doc); ``None`` if ``landed`` may be acknowledged."""
        if self.fenced is not None:
            return self.fenced.in_flight()  # it landed, but is not acknowledged
        if self.abandoned is not None:
            # the writer was given up on (it is being closed): its late receipt is not
            # acknowledged, as the open goes on with a new writer
            return self.abandoned
        if self.unverified is not None:
            return self.unverified
        if landed.ledger < 0 or landed.entry < 0:
            # seen under connection resets: a receipt with no position (-1:-1); the
            # entry it stands for may be in the log, so the guard starts over
            self.last_landed = None
            return UnknownPositionError(
                f"append on {self.channel!r}: the broker gave no position ({landed})"
            )
        last = self.last_landed
        if last is None or landed.ledger != last.ledger or landed.entry <= last.entry + 1:
            if last is None and self.first_landed is None:
                self.first_landed = landed
            if (
                last is None
                or landed.ledger != last.ledger
                or (landed.entry, landed.batch_index) > (last.entry, last.batch_index)
            ):  # fields, not MessageId ordering: two ABC checks less per receipt
                self.last_landed = landed
            return None
        log.error(
            "channel %s: another producer wrote between our entries %s and %s: "
            "this owner was fenced and let back in; appends stop",
            self.channel,
            last,
            landed,
        )
        self.fenced = ChannelFencedError(
            self.channel, f"another producer wrote between {last} and {landed}"
        )
        return self.fenced.in_flight()

    def failure(self, result: Any) -> StreamwalError:
        """The error of an append the client had accepted and then failed."""
        if self.fenced is not None:
            return self.fenced if self.in_flight_unwritten else self.fenced.in_flight()
        if self.abandoned is not None and result == _pulsar.Result.AlreadyClosed:
            return self.abandoned
        if result in FENCING_RESULTS and not self.closed:
            log.warning("channel %s: fenced by a newer owner (%s)", self.channel, result)
            self.fenced = ChannelFencedError(self.channel, f"broker says {result}")
            return self.fenced.in_flight()
        error = after_send(
            translate(PulsarException(result), channel=self.channel, what="append"), result
        )
        if error.outcome is WriteOutcome.UNKNOWN:
            # it may be in the log after the last placed position: what follows that
            # position is no longer known to be this owner's next appends in order
            self.last_landed = None
        return error

    def complete(self, done: AppendCallback, result: Any, message_id: Any) -> None:
        """Answer one append from its own receipt, through the guard."""
        if result == _pulsar.Result.Ok:
            landed = PulsarMessageId.from_pulsar(message_id)
            error = self.check_landed(landed)
            if error is None:
                done(landed, None)
            else:
                done(None, error)
            return
        done(None, self.failure(result))

    def fail_all(self, dones: list[AppendCallback | None], error: StreamwalError) -> None:
        """Answer every append of a segment (those not answered already) with ``error``."""
        for done in dones:
            if done is not None:
                self.in_flight -= 1
                done(None, error)
