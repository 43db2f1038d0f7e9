"""The balancer: one per cluster, elected on a node's session lease.

A node with ``cluster.balancer`` campaigns for the ``balancer`` key on its session
lease; the key's create revision is the term. Every assignment is written in a
transaction that compares the key's create revision with the term and the
assignment's mod revision with the one planned from, so a deposed balancer (lease
expired, a newer term began) writes nothing, and two writers never interleave on one
channel. The same transaction raises the channel's own term (``terms/<name>``, which
the new owner opens the channel under: :mod:`streamwal.node.terms`) by one. Safety
does not rest on this: the broker's fence does (docs/deploy.md).

Each written move is a span (``cluster.move``) whose context travels in the
assignment, so the new owner's ``wal.open`` joins the trace of the decision. A move
for ``node-lost`` is part of its failover's trace (:mod:`.failover`).

An operator's move (``requested/<channel>``, :class:`MoveRequest`) is answered in the
balancer's round: carried out (marked done with the move's trace id, in the
assignment's own transaction), refused when its node cannot take channels, or marked
done at once when the channel is there already. A done request whose channel has
since moved for another reason is deleted: its pin is over.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace

from opentelemetry import propagate, trace

from streamwal.cluster.failover import (
    FailoverStart,
    emit_failover_start,
    failover_context,
    new_failover,
)
from streamwal.cluster.membership import Session
from streamwal.cluster.metrics import record_balancer_term, record_channels_per_node, record_move
from streamwal.cluster.placement import Decision, plan_round
from streamwal.cluster.records import (
    Assignment,
    ClusterKeys,
    Move,
    MoveReason,
    MoveRequest,
    RequestState,
    encode,
    now_ms,
)
from streamwal.cluster.store import ClusterStore
from streamwal.cluster.view import ClusterView, read_view
from streamwal.errors import DeposedError, UnavailableError
from streamwal.node.terms import ChannelTerm, encode_term
from streamwal.tasks import RoundLoop

__all__ = ["Balancer"]

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
_KEPT_MOVES = 100
_MAX_HEAL_DOUBLINGS = 4


class Balancer(RoundLoop):
    def __init__(
        self,
        store: ClusterStore,
        keys: ClusterKeys,
        session: Session,
        *,
        seed_channels: tuple[str, ...],
        grace_s: float,
        max_moves: int,
        interval_s: float,
        open_failure_bound_s: float = 10.0,
        lease_ttl_s: float = 5.0,
    ) -> None:
        """``lease_ttl_s``: the nodes' lease TTL, which dates a lease-expiry failover's
        start (:mod:`.failover`)."""
        self._store = store
        self._keys = keys
        self._session = session
        self._seed = seed_channels
        self._grace_ms = int(grace_s * 1000)
        self._max_moves = max_moves
        self._interval = interval_s
        self._ttl_ms = int(lease_ttl_s * 1000)
        self._term = 0
        self._lease: int | None = None
        self._absent_since: dict[int, int] = {}
        #: live nodes holding channels while not ready (lost their broker): since when
        self._unready_since: dict[int, int] = {}
        self._heal_ms = int(open_failure_bound_s * 1000)
        #: open-failed moves of a channel in a row (reset once it serves): its backoff
        self._heals: dict[str, int] = {}

    @property
    def term(self) -> int:
        """The term held now (0: not the balancer)."""
        return self._term if self._session.lease_id == self._lease else 0

    async def start(self) -> None:
        self._start_rounds("cluster-balancer")

    async def close(self) -> None:
        await self._stop_rounds()

    def _round_failed(self, exc: Exception) -> bool:
        if isinstance(exc, DeposedError):
            _log.warning("cluster: balancer deposed: %s", exc)
            self._step_down()
        elif isinstance(exc, UnavailableError):
            _log.warning("cluster: balancer round skipped: %s", exc)
        else:
            _log.error("cluster: balancer round failed", exc_info=exc)
        return True

    def _step_down(self) -> None:
        self._term, self._lease = 0, None
        self._absent_since.clear()
        self._unready_since.clear()
        self._heals.clear()
        record_balancer_term(0, self._session.record.id)

    async def _round(self) -> None:
        view = await read_view(self._store, self._keys)
        if self.term and view.term != self._term:
            raise DeposedError(self._term)
        if not self.term:
            self._step_down()
            held_by_other = view.balancer_node not in (None, self._session.record.id)
            if held_by_other or not await self._campaign():
                return
            view = await read_view(self._store, self._keys)
        now = now_ms()
        assigned = {a.node for a in view.assignments.values()}
        for node in list(self._absent_since):
            if node in view.nodes:
                del self._absent_since[node]
        for node in assigned - set(view.nodes):
            self._absent_since.setdefault(node, now)
        unready = (assigned & set(view.nodes)) - view.ready_nodes()
        if not view.ready_nodes() - view.draining():
            # nowhere to move to (every node lost the broker, say): the grace starts once
            # a node is ready again, so the others get their time to come back before
            # their channels all move onto the first one
            unready = set()
        for node in list(self._unready_since):
            if node not in unready:
                del self._unready_since[node]
        for node in unready:
            self._unready_since.setdefault(node, now)
        for channel in list(self._heals):
            if view.serving(channel) or channel not in view.channels:
                del self._heals[channel]
        decisions = plan_round(
            view,
            now_ms=now,
            absent_since_ms=self._absent_since,
            unready_since_ms=self._unready_since,
            grace_ms=self._grace_ms,
            max_moves=self._max_moves,
            heal_after_ms=self._heal_after_ms,
        )
        for decision in decisions:
            if await self._apply(view, decision) and decision.reason == MoveReason.OPEN_FAILED:
                self._heals[decision.channel] = self._heals.get(decision.channel, 0) + 1
        await self._answer_requests(view, {d.channel for d in decisions})
        counts = Counter(a.node for a in view.assignments.values())
        record_channels_per_node({n: counts.get(n, 0) for n in view.nodes})
        if len(view.moves) > _KEPT_MOVES:
            for key, _move in view.moves[: len(view.moves) - _KEPT_MOVES]:
                await self._store.delete(key)

    async def _answer_requests(self, view: ClusterView, decided: set[str]) -> None:
        """Answer the operator's moves this round did not carry out, and end the pins
        of channels that moved for another reason (see the module docstring)."""
        for channel, (request, revision) in sorted(view.requests.items()):
            if channel in decided:
                continue
            held = view.assignments.get(channel)
            key = self._keys.requested + channel
            if request.state == RequestState.DONE:
                if held is None or held.node != request.node:
                    await self._store.fenced_write(
                        self._keys.balancer,
                        self._term,
                        expect={key: revision},
                        puts=[],
                        deletes=[key],
                    )
                continue
            if request.state != RequestState.PENDING:
                continue
            answer = _answer(view, request)
            if answer is not None:
                await self._store.fenced_write(
                    self._keys.balancer,
                    self._term,
                    expect={key: revision},
                    puts=[(key, encode(answer))],
                )

    def _heal_after_ms(self, channel: str) -> int:
        """The bound, doubled per open-failed move in a row (a broker that fails every
        node's opens must not make the channel bounce faster and faster)."""
        doublings: int = min(self._heals.get(channel, 0), _MAX_HEAL_DOUBLINGS)
        return self._heal_ms << doublings

    async def _campaign(self) -> bool:
        lease = self._session.lease_id
        if lease is None:
            return False
        term = await self._store.campaign(self._keys.balancer, encode(self._session.record), lease)
        if term is None:
            return False
        self._term, self._lease = term, lease
        self._absent_since.clear()
        record_balancer_term(term, self._session.record.id)
        _log.info("cluster: node %d runs the balancer, term %d", self._session.record.id, term)
        if self._seed:
            entries = {self._keys.channels + c: b"" for c in self._seed}
            await self._store.create_all_if_absent(self._keys.seeded, entries)
        return True

    async def _apply(self, view: ClusterView, decision: Decision) -> bool:
        key = self._keys.assign + decision.channel
        expect = {key: view.assignment_revisions.get(decision.channel, 0)}
        attributes: dict[str, str | int] = {
            "streamwal.channel": decision.channel,
            "streamwal.cluster.reason": decision.reason,
            "streamwal.cluster.term": self._term,
            "streamwal.cluster.from": -1 if decision.previous is None else decision.previous,
            "streamwal.cluster.to": -1 if decision.node is None else decision.node,
        }
        failover: dict[str, str] = {}
        start: FailoverStart | None = None
        if decision.reason == MoveReason.NODE_LOST and decision.previous is not None:
            failover = new_failover()
            lost = view.lost.get(decision.previous)
            absent = self._absent_since.get(decision.previous)
            start = FailoverStart.of(lost, absent, self._ttl_ms, int(self._interval * 1000))
            attributes["streamwal.cluster.evidence"] = start.evidence
        parent = failover_context(failover)
        with _tracer.start_as_current_span(
            "cluster.move", context=parent, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            at = now_ms()
            trace_id = format(span.get_span_context().trace_id, "032x")
            move = Move(
                decision.channel,
                decision.previous,
                -1 if decision.node is None else decision.node,
                decision.reason,
                self._term,
                at,
                trace_id,
                decision.detail,
            )
            puts = [(self._keys.move(time.time_ns(), decision.channel), encode(move))]
            if decision.request is not None:  # done in the move's own transaction
                request, revision = decision.request
                request_key = self._keys.requested + decision.channel
                expect[request_key] = revision
                done = replace(request, state=RequestState.DONE, trace_id=trace_id)
                puts.append((request_key, encode(done)))
            deletes: list[str] = []
            if decision.node is None:
                deletes = [
                    key,
                    self._keys.status + decision.channel,
                    self._keys.released + decision.channel,
                ]
            else:
                channel_term = view.channel_term(decision.channel) + 1
                term_key = self._keys.terms + decision.channel
                held = view.terms.get(decision.channel)
                expect[term_key] = 0 if held is None else held[1]
                record = ChannelTerm(decision.channel, channel_term, decision.node, at)
                puts.append((term_key, encode_term(record)))
                assignment = Assignment(
                    decision.channel,
                    decision.node,
                    self._term,
                    decision.reason,
                    at,
                    decision.previous,
                    decision.lost_at_ms,
                    carrier,
                    failover,
                    None if start is None else start.last_alive_ms,
                    0 if start is None else start.precision_ms,
                    "" if start is None else start.evidence,
                    channel_term,
                )
                puts.append((key, encode(assignment)))
            written = await self._store.fenced_write(
                self._keys.balancer, self._term, expect=expect, puts=puts, deletes=deletes
            )
            span.set_attribute("streamwal.cluster.written", written)
        if written and start is not None and decision.previous is not None:
            emit_failover_start(failover, start, decision.previous, at)
        if written:
            record_move(decision.reason)
            _log.info(
                "cluster: %s -> node %s (%s, term %d)%s",
                decision.channel,
                decision.node,
                decision.reason,
                self._term,
                f": {decision.detail}" if decision.detail else "",
            )
        return written


def _answer(view: ClusterView, request: MoveRequest) -> MoveRequest | None:
    """A pending request's answer when this round did not carry it out: refused, or
    done already; ``None`` when a later round carries it out (this round's write of
    it lost a race with another change of the channel)."""
    held = view.assignments.get(request.channel)
    node = request.node
    why = ""
    if request.channel not in view.channels:
        why = f"channel {request.channel} left the channel set"
    elif node not in view.nodes:
        why = f"node {node} is not a live member"
    elif node in view.draining():
        why = f"node {node} is drained"
    elif node not in view.ready_nodes():
        why = f"node {node} is not ready ({view.nodes[node].not_ready})"
    elif held is not None and held.node == node:
        return replace(request, state=RequestState.DONE, detail=f"already on node {node}")
    else:
        return None
    return replace(request, state=RequestState.REFUSED, detail=why)
