"""A channel's topic moving between brokers costs its appenders nothing, and a takeover
fences the old owner whichever broker each of them reached (the cluster profile).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Mapping

import pytest

from streamwal.adaptors.pulsar import PulsarBackendWAL, PulsarConfig, PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.metrics import READ_AGAIN, segment_count
from streamwal.adaptors.testing import writable
from streamwal.errors import ChannelFencedError, StreamwalError
from streamwal.wal.backend import AccessMode, append_entry
from streamwal.wal.message_id import MessageId
from streamwal.wal.retention_contract import Checkpoint
from streamwal_lab.stack.bundles import move_topic, owner_of
from streamwal_lab.stack.cluster import ClusterInfo
from tests.adaptors.pulsar.topic_log import keep_appending, key, read_log, read_log_writers

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

APPENDERS = 8
MOVES = 6
TAKEOVERS = 20


def _config(cluster: ClusterInfo, admin_url: str | None = None) -> PulsarConfig:
    return PulsarConfig(service_url=cluster.pulsar_url, admin_url=admin_url or cluster.admin_url)


def _moving(cluster: ClusterInfo, channel: str) -> tuple[str, PulsarConfig, str, PulsarAdmin]:
    """A channel of the cluster profile: its name, config and topic, and the admin that
    moves the topic."""
    config = _config(cluster)
    return channel, config, config.topic(channel), PulsarAdmin(cluster.admin_url)


def _other(cluster: ClusterInfo, broker: str) -> str:
    return next(b for b in cluster.broker_ids if b != broker)


async def _writable(opener: PulsarOpener, channel: str) -> PulsarBackendWAL:
    wal = await writable(opener, channel)
    assert isinstance(wal, PulsarBackendWAL)
    return wal


def _assert_clean_log(
    cluster: ClusterInfo, topic: str, acked: list[tuple[MessageId, bytes]]
) -> dict[tuple[int, int, int], bytes]:
    log = read_log(cluster.pulsar_url, topic)
    misplaced = [(at, payload) for at, payload in acked if log.get(key(at)) != payload]
    assert not misplaced, f"{len(misplaced)} acknowledged appends not at their id: {misplaced[:3]}"
    assert len({at for at, _ in acked}) == len(acked)
    return log


async def _acked_beyond(acked: list[tuple[MessageId, bytes]], count: int, within: float) -> bool:
    """Whether more than ``count`` appends are acknowledged within ``within`` seconds:
    the wait ends as soon as they are, where a fixed sleep would always last."""
    deadline = time.monotonic() + within
    while len(acked) <= count:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_a_channel_moved_between_brokers_under_load_fails_no_append(
    pulsar_cluster: ClusterInfo, unique: str
) -> None:
    channel, config, topic, admin = _moving(pulsar_cluster, f"cluster-moves-{unique}")
    acked: list[tuple[MessageId, bytes]] = []
    failed: list[BaseException] = []
    owners: list[str] = []
    stop = asyncio.Event()
    async with PulsarOpener(config) as opener:
        wal = await _writable(opener, channel)
        owners.append(await owner_of(admin, topic))
        writers = [
            asyncio.create_task(keep_appending(wal, f"w{w}", stop, acked, failed))
            for w in range(APPENDERS)
        ]
        try:
            for _ in range(MOVES):
                # the move starts under load: every appender has had time for a turn
                flowing = await _acked_beyond(acked, len(acked) + APPENDERS, 10.0)
                assert flowing, f"appends not flowing before move {len(owners)}"
                before = len(acked)
                destination = _other(pulsar_cluster, owners[-1])
                await move_topic(admin, topic, destination)
                owners.append(await owner_of(admin, topic))
                assert await _acked_beyond(acked, before, 1.0), "appends stopped after a move"
        finally:
            stop.set()
            await asyncio.gather(*writers)
        with contextlib.suppress(Exception):
            await wal.close()
    assert owners == [owners[i % 2] for i in range(MOVES + 1)]  # moved every time
    assert not failed, f"{len(failed)} failed appends, first: {failed[0]!r}"
    log = await asyncio.to_thread(_assert_clean_log, pulsar_cluster, topic, acked)
    assert len(log) == len(acked) == len(set(log.values()))  # each once, nothing else


async def _take_over(opener: PulsarOpener, channel: str, retaken: list[str]) -> PulsarBackendWAL:
    """Open ``channel`` for writing; an open that ends as taken over during the open
    (an earlier owner's writer came back) is opened again, twice at most."""
    for attempt in range(3):
        wal = await opener.open(channel, AccessMode.READ_WRITE)
        assert isinstance(wal, PulsarBackendWAL)
        try:
            await wal.ensure_writable()
            return wal
        except ChannelFencedError as exc:
            await wal.close()
            if "during the open" not in str(exc) or attempt == 2:
                raise
            retaken.append(str(exc))
    raise AssertionError("unreachable")


async def test_takeovers_during_bundle_moves_leave_one_writer_and_a_clean_log(
    pulsar_cluster: ClusterInfo, unique: str
) -> None:
    """Each round: the owner writes, its topic starts moving to the other broker, and
    another opener takes the channel over meanwhile. The new owner must write within
    seconds; once it has, the old owner's next append must be refused (never
    acknowledged, and not in the log); every acknowledgement of either is in the log at
    its place.

    An open can still end as "taken over during the open" when the old owner's writer
    reattaches to the new broker as the fence arrives there (open, see
    docs/reliability.md "Across brokers"); the opener then opens again, as the balancer
    does after a failed open, and that second fence evicts it."""
    # the default send timeout (30 s): an old owner whose client does not reconnect
    # after the move learns of its fence from the log (adaptors.pulsar.fencewatch)
    channel, config, topic, admin = _moving(pulsar_cluster, f"cluster-takeovers-{unique}")
    acked: list[tuple[MessageId, bytes]] = []
    refused: list[bytes] = []
    opened_in: list[float] = []
    refused_in: list[float] = []
    retaken: list[str] = []
    openers = [PulsarOpener(config), PulsarOpener(config)]
    for opener in openers:
        await opener.start()
    try:
        owner = await _writable(openers[0], channel)
        for round_ in range(TAKEOVERS):
            old = owner
            sent = [f"r{round_}-old-{i}".encode() for i in range(16)]
            pending = [asyncio.ensure_future(append_entry(old, p, {})) for p in sent]
            broker = await owner_of(admin, topic)
            move = asyncio.create_task(move_topic(admin, topic, _other(pulsar_cluster, broker)))
            await asyncio.sleep(0.05 * (round_ % 4))
            started = time.monotonic()
            owner = await asyncio.wait_for(
                _take_over(openers[(round_ + 1) % 2], channel, retaken), 30
            )
            first = f"r{round_}-new".encode()
            acked.append((await append_entry(owner, first, {}), first))
            opened_in.append(time.monotonic() - started)
            await move
            late = f"r{round_}-late".encode()
            started = time.monotonic()
            with pytest.raises(StreamwalError):  # fenced, or an outcome never acknowledged
                await append_entry(old, late, {})
            refused_in.append(time.monotonic() - started)
            refused.append(late)
            for done, payload in zip(
                await asyncio.gather(*pending, return_exceptions=True), sent, strict=True
            ):
                if isinstance(done, MessageId):
                    acked.append((done, payload))
                else:
                    assert isinstance(done, StreamwalError), done
            with contextlib.suppress(Exception):
                await old.close()
        await owner.close()
    finally:
        for opener in openers:
            await opener.close()
    print(
        f"\n{TAKEOVERS} takeovers during moves: new owner writing after "
        f"{sorted(opened_in)[TAKEOVERS // 2]:.2f} s (median), {max(opened_in):.2f} s (max); "
        f"old owner refused after {sorted(refused_in)[TAKEOVERS // 2] * 1000:.0f} ms "
        f"(median), {max(refused_in):.1f} s (max); opened again after a takeover "
        f"during the open: {len(retaken)}"
    )
    assert max(opened_in) < 10, opened_in
    assert max(refused_in) < 3, refused_in
    log = await asyncio.to_thread(_assert_clean_log, pulsar_cluster, topic, acked)
    assert not set(refused) & set(log.values()), "a refused append of an old owner is in the log"
    assert len(log) == len(set(log.values()))  # nothing written twice
    # every owner wrote as a producer of its own, named by the broker that created it:
    # the brokers' deduplication, kept per producer name, cannot take one owner's
    # messages for copies of another's
    writers = await asyncio.to_thread(read_log_writers, pulsar_cluster.pulsar_url, topic)
    by_payload = dict(writers.values())
    new_owners = [by_payload[f"r{r}-new".encode()] for r in range(TAKEOVERS)]
    assert len(set(new_owners)) == TAKEOVERS, new_owners
    for round_, name in enumerate(new_owners):
        earlier = {w for p, w in by_payload.items() if p.startswith(f"r{round_}-old-".encode())}
        assert name not in earlier, (round_, name)


async def _checkpoint_and_truncate(
    wal: PulsarBackendWAL, ids: list[MessageId], *, checkpoint_at: int, truncate_at: int
) -> None:
    """Save a checkpoint and truncate; the topic's retention state shows both."""
    await wal.save_checkpoint(Checkpoint("flusher", ids[checkpoint_at], checkpoint_at))
    await wal.truncate(ids[truncate_at])
    state = await wal.retention_state()
    assert state.truncated_before == ids[truncate_at]
    checkpoint = state.checkpoint_of("flusher")
    assert checkpoint is not None and checkpoint.message_id == ids[checkpoint_at]


async def test_checkpoints_and_truncation_through_a_broker_that_does_not_own_the_topic(
    pulsar_cluster: ClusterInfo, unique: str
) -> None:
    """Every admin write of the WAL (a consumer's checkpoint, the truncation point, the
    cursor's reset) reaches the topic's owner from a broker that redirects to it, also
    right after the topic moved."""
    channel = f"cluster-checkpoints-{unique}"
    topic = _config(pulsar_cluster).topic(channel)
    admin = PulsarAdmin(pulsar_cluster.admin_url)
    async with PulsarOpener(_config(pulsar_cluster)) as opener:
        wal = await _writable(opener, channel)
        ids = [await append_entry(wal, f"m{i}".encode(), {}) for i in range(20)]
        await wal.close()
    owner = await owner_of(admin, topic)
    away = pulsar_cluster.broker_admin_urls[
        pulsar_cluster.broker_ids.index(_other(pulsar_cluster, owner))
    ]
    async with PulsarOpener(_config(pulsar_cluster, admin_url=away)) as opener:
        wal = await _writable(opener, channel)
        await _checkpoint_and_truncate(wal, ids, checkpoint_at=10, truncate_at=5)
        # the topic goes to the broker the admin address names and comes back: that
        # broker owned it for a while, and redirects again now
        await move_topic(admin, topic, _other(pulsar_cluster, owner))
        await move_topic(admin, topic, owner)
        await _checkpoint_and_truncate(wal, ids, checkpoint_at=15, truncate_at=8)
        await wal.close()


READS_DURING_MOVES = 30


async def test_reading_back_while_the_topic_moves_never_waits_out_a_hung_reader(
    pulsar_cluster: ClusterInfo, unique: str
) -> None:
    """A reader created while its topic's bundle moves can wait for ever: its
    subscribe reached the broker giving the topic up, and the client does not ask
    again (4 of 40 readers created 0-150 ms into a move, in one run here). The
    read-back that places appends after a reconnect meets exactly that moment, so it
    starts over on a fresh reader: each read during a move finds the appends at their
    ids well inside the 10 s operation timeout a hung reader would have cost."""
    channel, config, topic, admin = _moving(pulsar_cluster, f"cluster-readback-{unique}")
    rng = random.Random(unique)
    async with PulsarOpener(config) as opener:
        wal = await _writable(opener, channel)
        properties: list[Mapping[str, str]] = [{"n": str(i)} for i in range(4)]
        ids = [
            await append_entry(wal, f"r{i}".encode(), properties[i]) for i in range(len(properties))
        ]
        payloads = [f"r{i}".encode() for i in range(1, len(ids))]
        first = ids[0]
        assert isinstance(first, PulsarMessageId)
        readback = wal._readback
        again = segment_count(channel, READ_AGAIN)
        took: list[float] = []
        for _ in range(READS_DURING_MOVES):
            owner = await owner_of(admin, topic)
            move = asyncio.create_task(move_topic(admin, topic, _other(pulsar_cluster, owner)))
            try:
                await asyncio.sleep(rng.uniform(0, 0.15))
                started = time.monotonic()
                found = await asyncio.wait_for(
                    readback.retrying(
                        functools.partial(readback._messages_after, first, payloads, properties[1:])
                    ),
                    config.operation_timeout_s,
                )
                took.append(time.monotonic() - started)
                assert found == ids[1:]
            finally:
                await move
        await wal.close()
    assert max(took) < 5.0, sorted(took)
    print(
        f"{READS_DURING_MOVES} reads during moves: slowest {max(took):.2f} s, "
        f"{segment_count(channel, READ_AGAIN) - again} started over"
    )
