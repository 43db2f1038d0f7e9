"""The takeover suite: how fast a second node takes a busy channel over.

Two nodes in one process (two ``PulsarOpener``, so two clients and two broker
connections; one TSO, an allocator each) pass one channel back and forth. In each
round the owner is appending with a few tasks when the other node calls ``open_wal``;
the figures, all from that call:

- ``open_ms``: until the new owner's WAL is ready (fence + first time tick);
- ``first_append_ms``: until the new owner's first append returns;
- ``old_owner_fails_ms``: until an append of the old owner fails (it is fenced).

No session has to expire: ``ExclusiveWithFencing`` removes the old producer at once.
The raw baseline does the same with two exclusive-with-fencing producers, one create
and one send. Raw and WAL rounds alternate, each on its own topic.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.backoff import Backoff
from streamwal.retry import Retry, retry_call
from streamwal.tso import LocalAllocator
from streamwal.wal.initializing import open_wal
from streamwal.wal.message import MessageType, MutableMessage
from streamwal_lab.bench.raw import raw_producer
from streamwal_lab.bench.stats import distribution, ratio
from streamwal_lab.bench.target import BenchTarget, new_run

__all__ = ["run_takeover_bench"]

_PAYLOAD = b"t" * 128
_FAIL_WAIT_S = 10.0  # bound on waiting for the old owner to notice
_RETAKE_PAUSE = Backoff(initial=0.2, maximum=0.2)  # a fixed pause between takeovers


@dataclass
class _Owner:
    """One side's open channel: how to append to it, how to let it go."""

    append: Callable[[], Awaitable[object]]
    close: Callable[[], Awaitable[None]]


@dataclass
class _Round:
    open_s: float
    first_append_s: float
    old_fails_s: float | None
    old_error: str


async def _append_until_failure(owner: _Owner, failed: asyncio.Future[tuple[float, str]]) -> None:
    while not failed.done():
        try:
            await owner.append()
        except Exception as exc:
            if not failed.done():
                failed.set_result((time.perf_counter(), type(exc).__name__))
            return


async def _round(
    old: _Owner, take: Callable[[], Awaitable[_Owner]], appenders: int, settle_s: float
) -> tuple[_Round | str, _Owner]:
    """One takeover of ``old`` by ``take``: its figures, or the error if it failed.

    After a failed takeover the channel is taken again (a few tries) so the next round
    has an owner; the failure is reported, not hidden.
    """
    loop = asyncio.get_running_loop()
    failed: asyncio.Future[tuple[float, str]] = loop.create_future()
    tasks = [asyncio.create_task(_append_until_failure(old, failed)) for _ in range(appenders)]
    try:
        await asyncio.sleep(settle_s)  # the old owner is busy when the takeover starts
        started = time.perf_counter()
        try:
            new = await take()
            opened = time.perf_counter()
            await new.append()
        except Exception as exc:
            await old.close()
            return repr(exc), await _retake(take)
        first = time.perf_counter()
        try:
            failed_at, error = await asyncio.wait_for(asyncio.shield(failed), _FAIL_WAIT_S)
            old_fails: float | None = failed_at - started
        except TimeoutError:
            old_fails, error = None, "no failure"
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await old.close()
    return _Round(opened - started, first - started, old_fails, error), new


async def _retake(take: Callable[[], Awaitable[_Owner]], attempts: int = 5) -> _Owner:
    """Take the channel over and append once, again on any failure (``attempts`` in all)."""

    async def once() -> _Owner:
        owner = await take()
        await owner.append()
        return owner

    return await retry_call(once, Retry(_RETAKE_PAUSE, max_attempts=attempts, retry_if=Exception))


def _summary(results: list[_Round | str]) -> dict[str, Any]:
    rounds = [r for r in results if isinstance(r, _Round)]
    failures = [r for r in results if isinstance(r, str)]
    fails = [r.old_fails_s for r in rounds if r.old_fails_s is not None]
    return {
        "failed_takeovers": len(failures),
        "failure_errors": sorted(set(failures)),
        "open": distribution([r.open_s for r in rounds]),
        "first_append": distribution([r.first_append_s for r in rounds]),
        "old_owner_fails": distribution(fails),
        "old_owner_never_failed": sum(1 for r in rounds if r.old_fails_s is None),
        "old_owner_errors": sorted({r.old_error for r in rounds}),
    }


async def run_takeover_bench(
    target: BenchTarget,
    *,
    takeovers: int = 50,
    appenders: int = 4,
    settle_s: float = 0.1,
) -> dict[str, Any]:
    """``takeovers`` WAL takeovers and as many raw ones, alternating."""
    run = new_run()
    config = target.pulsar_config(admin=True)
    wal_rounds: list[_Round | str] = []
    raw_rounds: list[_Round | str] = []
    async with (
        target.wal_services(f"/bench-to-{run}", config) as (tso, opener_a),
        PulsarOpener(config) as opener_b,
    ):
        for opener in (opener_a, opener_b):
            await opener.verify_broker()  # once per node at start, not in a takeover
        nodes = [(opener_a, tso.allocator(), 1), (opener_b, tso.allocator(), 2)]
        channel = f"bench-takeover-{run}"
        raw_topic = config.topic(f"bench-takeover-raw-{run}")
        wal_owner = await _wal_owner(*nodes[0], channel)
        raw_owner = await _raw_owner(opener_a.client, raw_topic, config)
        for i in range(takeovers):
            opener, allocator, node_id = nodes[(i + 1) % 2]
            take_raw = functools.partial(_raw_owner, opener.client, raw_topic, config)
            take_wal = functools.partial(_wal_owner, opener, allocator, node_id, channel)

            result, raw_owner = await _round(raw_owner, take_raw, appenders, settle_s)
            raw_rounds.append(result)
            result, wal_owner = await _round(wal_owner, take_wal, appenders, settle_s)
            wal_rounds.append(result)
            if (i + 1) % 10 == 0:
                target.progress(f"takeover: {i + 1}/{takeovers} rounds")
        await wal_owner.close()
        await raw_owner.close()
    wal, raw = _summary(wal_rounds), _summary(raw_rounds)
    return {
        "takeovers": takeovers,
        "appenders_on_old_owner": appenders,
        "wal": wal,
        "raw": raw,
        "first_append_p99_ratio": ratio(
            wal["first_append"].get("p99_ms", 0), raw["first_append"].get("p99_ms", 0)
        ),
    }


async def _wal_owner(
    opener: PulsarOpener, allocator: LocalAllocator, node_id: int, channel: str
) -> _Owner:
    wal = await open_wal(opener, channel, allocator, node_id)

    async def append() -> object:
        return await wal.append(MutableMessage(MessageType.INSERT, _PAYLOAD))

    return _Owner(append, wal.close)


async def _raw_owner(client: Any, topic: str, config: PulsarConfig) -> _Owner:
    producer = await raw_producer(client, topic, config)

    async def append() -> object:
        return await producer.send(_PAYLOAD)

    async def close() -> None:
        try:
            await asyncio.wait_for(producer.close(), config.operation_timeout_s)
        except Exception:  # fenced: nothing to flush
            return

    return _Owner(append, close)
