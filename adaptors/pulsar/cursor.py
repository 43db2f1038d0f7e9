"""The WAL's durable cursor: what makes a stock broker keep a channel's log.

A broker keeps only what some durable subscription still has to read ("no messages
are retained, by default, on a topic that has not had any subscriptions created for
it"), and deletes a topic with no subscription once it has been inactive for a while
(``delete_when_no_subscriptions``, the default). The WAL reads with non-durable
readers, which hold nothing. So every channel gets one durable subscription, created
before its first time tick is written and never acknowledged: everything in the log
stays in that subscription's backlog, whatever the namespace's retention, and the
topic is never inactive-deleted.

It is a ``Shared`` subscription, so two owners creating it during a takeover never get
``ConsumerBusy``; its consumer is closed at once, and nothing is ever acknowledged on
it (truncation, when it exists, will be the one place that moves it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pulsar
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.closing import close_quietly, reap
from streamwal.adaptors.pulsar.errors import translate
from streamwal.errors import UnavailableError
from streamwal.timeouts import within

__all__ = ["hold_log"]


#: seconds one subscription attempt waits: the client, refused with "retryable" while
#: the topic's bundle moves between brokers, can leave its own retry unscheduled until
#: the whole timeout is over; a new attempt looks the topic up afresh
_ATTEMPT_S = 2.0

#: reapers of consumers created after their attempt was given up on
_reapers: set[asyncio.Future[None]] = set()


async def hold_log(client: Any, topic: str, subscription: str, timeout: float) -> None:
    """Create the durable cursor at the log's earliest entry, if it is not there yet.

    Subscribing to an existing subscription changes nothing (its position is kept).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        creation = asyncio.ensure_future(
            client.subscribe(
                topic,
                subscription,
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
                receiver_queue_size=1,
                consumer_name=f"{subscription}-holder",
            )
        )
        wait = max(0.0, min(_ATTEMPT_S, deadline - loop.time()))
        try:
            consumer = await within(asyncio.shield(creation), timeout=wait)
            break
        except PulsarException as exc:
            raise translate(exc, channel=topic, what="create the WAL's subscription") from exc
        except (TimeoutError, asyncio.CancelledError) as exc:
            reap(creation, timeout, _reapers)
            if isinstance(exc, asyncio.CancelledError):
                raise
            if loop.time() >= deadline:
                raise UnavailableError(
                    f"{topic}: creating the WAL's subscription {subscription!r} timed out"
                ) from exc
    # the subscription is durable already; a consumer the broker lost goes with it
    await close_quietly(consumer, timeout)
