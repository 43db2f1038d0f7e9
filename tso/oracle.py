"""The timestamp oracle: the leader side of TSO, after TiDB PD's design.

While leader, the oracle holds ``(physical, logical)`` in memory and hands out
``compose(physical, logical + n)`` without any I/O. Safety across leaders rests on
the saved window: no timestamp with physical part ``P`` is served before a bound
``W > P`` is persisted in etcd (fenced by the leader key), and a new leader starts at
``max(now, W + 1 ms)`` and persists its own window before serving. Physical time only
moves on the update loop (every ``update_interval_s``) or by one millisecond when the
logical counter runs out, never backward: a wall clock that jumps back only raises a
metric and a warning.

Concurrency: everything runs on one event loop; :meth:`generate` does not await on
its fast path, so no two callers can observe the same state. Losing leadership (lease
deadline, rejected save, revoked lease) resets the state to zero synchronously, so the
very next :meth:`generate` refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import Final

from streamwal.errors import (
    ClosedError,
    DecodeError,
    InvalidInputError,
    NotLeaderError,
    StreamwalError,
    TimestampOverflowError,
    TimestampRegressionError,
    UnavailableError,
)
from streamwal.lifecycle import Startable
from streamwal.tso.clock import Clock, SystemClock
from streamwal.tso.config import TsoConfig
from streamwal.tso.election import Election
from streamwal.tso.etcd_store import EtcdStore
from streamwal.tso.metrics import record_clock_went_back, record_step_down
from streamwal.tso.store import CoordinationStore, LeaderRecord, decode_window
from streamwal.tso.timestamp import LOGICAL_BITS, MAX_LOGICAL

__all__ = ["OracleStats", "TimestampOracle"]

_log = logging.getLogger(__name__)

_MAX_OVERFLOW_RETRIES = 10  # as PD: then the caller gets TimestampOverflowError
_SAVE_GUARD_MS = 1  # save a new window once physical is this close to the saved one


@dataclass(frozen=True)
class OracleStats:
    """Counters of one oracle since it was built (a snapshot)."""

    terms: int
    """Times this oracle became leader and started serving."""
    step_downs: int
    last_step_down_reason: str | None
    saves: int
    """Window saves that etcd accepted (including the one at the start of each term)."""
    last_saved_ms: int
    """The current term's saved window; 0 when not serving."""
    clock_went_back: int
    overflow_waits: int
    physical_advances: int
    """Times the logical counter ran out and physical moved on by 1 ms inline."""


class TimestampOracle(Startable):
    """Campaigns for TSO leadership and, while leader, serves timestamps.

    ``address`` is what followers tell callers to redirect to (the gRPC address of
    this node's TSO service), empty if it serves in-process only. ``store`` defaults
    to an :class:`EtcdStore` on ``config.etcd_endpoints`` owned by the oracle.

    Lifecycle: :meth:`start` launches the campaign loop (no I/O in ``__init__``);
    :meth:`close` stops it, resigns (revokes the lease) and is idempotent; afterwards
    every method raises :class:`ClosedError`.
    """

    def __init__(
        self,
        config: TsoConfig,
        *,
        address: str = "",
        store: CoordinationStore | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config: Final = config
        self._clock = clock if clock is not None else SystemClock()
        self._owns_store = store is None
        self._store: CoordinationStore = (
            store if store is not None else EtcdStore.from_config(config)
        )
        self._record = LeaderRecord(id=uuid.uuid4().hex, address=address)
        self._election = Election(
            self._store,
            leader_key=config.leader_key,
            record=self._record,
            lease_ttl_s=config.lease_ttl_s,
            clock=self._clock,
            request_timeout_s=config.etcd_timeout_s,
            on_lost=self._on_lost,
        )
        self._interval = config.update_interval_s
        self._campaign_retry_s = min(0.5, max(0.05, config.lease_ttl_s / 6.0))
        # serving state: meaningful only while _serving
        self._physical = 0
        self._logical = 0
        self._last_saved = 0
        self._serving = False
        self._term = 0
        self._last_wall = 0
        self._want_advance = False  # a caller waits for physical to move (logical ran out)
        self._lost: asyncio.Event | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._failure: BaseException | None = None
        self._etcd_error: UnavailableError | None = None
        # stats
        self._terms = 0
        self._step_downs = 0
        self._last_reason: str | None = None
        self._saves = 0
        self._went_back = 0
        self._overflow_waits = 0
        self._advances = 0

    # --- properties -------------------------------------------------------------

    @property
    def address(self) -> str:
        return self._record.address

    @property
    def identity(self) -> bytes:
        """This oracle's leader-key value (the fence of its window saves)."""
        return self._election.value

    @property
    def is_serving(self) -> bool:
        """True while leader with a persisted window; :meth:`generate` then succeeds."""
        return self._serving and self._election.is_leader

    @property
    def lease_id(self) -> int | None:
        return self._election.lease_id

    async def depose_dead_leader(self, address: str) -> bool:
        """End the term of a leader found dead at ``address`` (another node's port there
        refused connections: :mod:`streamwal.cluster.liveness`) instead of waiting out
        its lease: revoke the lease its leader key is on, so a candidate campaigns at
        once. Safe because the oracle is served on that refused port: nobody can take a
        timestamp from it any more, and a new leader starts above its saved window.
        ``True`` if it was the leader and its lease was revoked."""
        config = self.config
        raw = await self._store.get(config.leader_key, timeout=config.etcd_timeout_s)
        if raw is None:
            return False
        try:
            leader = LeaderRecord.decode(raw)
        except DecodeError:
            return False
        if not leader.address or leader.address != address or leader.id == self._record.id:
            return False
        revoked = await self._store.revoke_if_value(
            config.leader_key, raw, timeout=config.etcd_timeout_s
        )
        if revoked:
            _log.warning("TSO: leader at %s found dead; its term is ended", address)
        return revoked

    @property
    def leader_address(self) -> str | None:
        """The address of the leader this node knows of (itself when serving), if any."""
        leader = self._election.observed_leader
        return (leader.address or None) if leader is not None else None

    @property
    def stats(self) -> OracleStats:
        return OracleStats(
            terms=self._terms,
            step_downs=self._step_downs,
            last_step_down_reason=self._last_reason,
            saves=self._saves,
            last_saved_ms=self._last_saved,
            clock_went_back=self._went_back,
            overflow_waits=self._overflow_waits,
            physical_advances=self._advances,
        )

    # --- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        """Start campaigning; returns at once (use :meth:`wait_serving` to wait)."""
        if self._closed:
            raise ClosedError("TSO oracle is closed")
        if self._task is not None:
            return
        await self._store.start()
        self._task = asyncio.create_task(self._run_guarded(), name="tso-oracle")

    async def close(self) -> None:
        """Stop serving, resign leadership and release the store; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._serving:
            self._step_down("closed")
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        try:
            await self._election.close()
        finally:
            if self._owns_store:
                await self._store.close()
            self._notify()

    # --- serving ----------------------------------------------------------------

    async def generate(self, count: int = 1) -> int:
        """Reserve ``count`` consecutive timestamps and return the largest.

        The range is ``[result - count + 1, result]``, all above anything this cluster
        handed out before. Raises :class:`NotLeaderError` (naming the leader) on a
        follower, :class:`UnavailableError` when no leader is known (campaign running,
        etcd unreachable), :class:`TimestampOverflowError` when the logical counter
        stays exhausted for 10 attempts, :class:`InvalidInputError` for a bad count,
        :class:`ClosedError` after :meth:`close`.
        """
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count < MAX_LOGICAL:
            raise InvalidInputError(f"count: must be in [1, {MAX_LOGICAL}): {count!r}")
        for _ in range(_MAX_OVERFLOW_RETRIES):
            if not self._serving:
                raise self._not_serving_error()
            if not self._election.is_leader:
                self._step_down("lease deadline passed")
                raise self._not_serving_error()
            logical = self._logical + count
            if logical < MAX_LOGICAL:
                self._logical = logical
                return (self._physical << LOGICAL_BITS) | logical
            if self._physical + 1 < self._last_saved:
                # Logical ran out: move physical on by 1 ms, still inside the saved window.
                self._physical += 1
                self._logical = 0
                self._advances += 1
                continue
            self._overflow_waits += 1
            self._want_advance = True
            await asyncio.sleep(self._interval)
        raise TimestampOverflowError(
            f"logical counter exhausted {_MAX_OVERFLOW_RETRIES} times for count={count}"
        )

    async def wait_serving(
        self, timeout: float | None = None, *, fail_if_follower: bool = False
    ) -> None:
        """Wait until this oracle serves, at most ``timeout`` (default: the unavailable bound).

        Raises what :meth:`generate` would raise once the bound passes, at once with
        :class:`NotLeaderError` when ``fail_if_follower`` and another node leads, and
        :class:`ClosedError` if the oracle is closed while waiting.
        """
        loop = asyncio.get_running_loop()
        bound = self.config.unavailable_after_s if timeout is None else timeout
        deadline = loop.time() + bound
        while not self.is_serving:
            error = self._not_serving_error()
            if isinstance(error, ClosedError) or self._failure is not None:
                raise error
            if fail_if_follower and isinstance(error, NotLeaderError):
                raise error
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise error
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, self._campaign_retry_s)):
                    await changed.wait()

    def _not_serving_error(self) -> StreamwalError:
        if self._closed:
            return ClosedError("TSO oracle is closed")
        if self._failure is not None:
            return UnavailableError(f"TSO oracle stopped: {self._failure!r}")
        leader = self._election.observed_leader
        if leader is not None and leader.id != self._record.id:
            return NotLeaderError(leader.address or None)
        if self._etcd_error is not None:
            return UnavailableError(f"no TSO leader: {self._etcd_error}")
        return UnavailableError("no TSO leader yet: election in progress")

    # --- leadership loop --------------------------------------------------------

    async def _run_guarded(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            _log.exception("TSO oracle loop died")
            self._failure = exc
            if self._serving:
                self._step_down(f"oracle loop died: {exc!r}")
            self._notify()

    async def _run(self) -> None:
        # Checks _closed as well as relying on cancellation, so a cancellation lost
        # inside a library call can never keep a closed oracle campaigning.
        while not self._closed:
            try:
                won = await self._election.campaign()
                self._etcd_error = None
            except UnavailableError as exc:
                self._etcd_error = exc
                self._notify()
                await asyncio.sleep(self._campaign_retry_s)
                continue
            if not won:
                self._notify()
                await asyncio.sleep(self._campaign_retry_s)
                continue
            try:
                await self._lead()
            except UnavailableError as exc:
                self._etcd_error = exc
                _log.warning("TSO leader could not start serving: %s", exc)
            finally:
                if self._serving or self._election.is_leader:
                    self._step_down("left the leader loop")
                await self._election.resign()
                self._notify()

    async def _lead(self) -> None:
        """Load the saved window, persist a new one, serve until leadership ends."""
        lost = self._lost = asyncio.Event()
        config = self.config
        raw = await self._store.get(config.timestamp_key, timeout=config.etcd_timeout_s)
        saved = decode_window(raw) if raw is not None else None
        now = self._clock.wall_ms()
        start = now if saved is None else max(now, saved + 1)
        window = start + config.save_window_ms
        if not await self._save(window, previous=saved):
            return
        if lost.is_set() or self._closed or not self._election.is_leader:
            return
        self._physical, self._logical, self._last_saved = start, 0, window
        self._last_wall = now
        self._serving = True
        self._term += 1
        self._terms += 1
        _log.info(
            "TSO serving from physical %d (saved window %s, now %d, new window %d)",
            start,
            saved,
            now,
            window,
        )
        self._notify()
        while not lost.is_set():
            await asyncio.sleep(self._interval)
            if lost.is_set() or self._closed:
                return
            if not self._election.is_leader:
                self._step_down("lease deadline passed")
                return
            await self._update()

    async def _save(self, window: int, *, previous: int | None) -> bool:
        """Persist ``window`` fenced by the leader key; ``False`` (stepped down) if refused."""
        try:
            await self._store.save_window(
                self.config.timestamp_key,
                window,
                previous_ms=previous,
                leader_key=self.config.leader_key,
                leader_value=self._election.value,
                timeout=self.config.etcd_timeout_s,
            )
        except (NotLeaderError, TimestampRegressionError) as exc:
            self._step_down(f"window save rejected: {exc}")
            return False
        self._saves += 1
        return True

    async def _update(self) -> None:
        """One tick of the update loop: move physical on (saving a window first if needed)."""
        now = self._clock.wall_ms()
        if now < self._last_wall:
            self._went_back += 1
            record_clock_went_back({"key_prefix": self.config.key_prefix})
            _log.warning(
                "wall clock went back by %d ms; TSO physical time holds at %d",
                self._last_wall - now,
                self._physical,
            )
        self._last_wall = now
        physical, logical = self._physical, self._logical
        if now - physical > 1:
            nxt = now
        elif logical > MAX_LOGICAL // 2 or self._want_advance:
            nxt = physical + 1
        else:
            return
        term = self._term
        if self._last_saved - nxt <= _SAVE_GUARD_MS:
            window = nxt + self.config.save_window_ms
            try:
                saved = await self._save(window, previous=self._last_saved)
            except UnavailableError as exc:
                _log.warning("TSO window save failed; physical time holds: %s", exc)
                return
            if not saved or term != self._term or not self._serving:
                return
            self._last_saved = max(self._last_saved, window)
        if nxt > self._physical:
            self._physical = nxt
            self._logical = 0
            self._want_advance = False

    def _on_lost(self, reason: str) -> None:
        self._step_down(reason)

    def _step_down(self, reason: str) -> None:
        """Stop serving now and forget the state; the run loop then resigns and re-campaigns."""
        was_serving = self._serving
        self._serving = False
        self._physical = self._logical = self._last_saved = 0
        self._want_advance = False
        self._term += 1
        self._election.step_down(reason)
        if self._lost is not None:
            self._lost.set()
        if was_serving:
            self._step_downs += 1
            self._last_reason = reason
            record_step_down(reason.split(":")[0])
            _log.log(
                logging.INFO if reason == "closed" else logging.WARNING,
                "TSO stopped serving: %s",
                reason,
            )
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
