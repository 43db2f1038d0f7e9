"""Large messages under kill -9 of the owner and takeovers timed between their chunks.

A message larger than the broker's ``maxMessageSize`` is written as
consecutive chunk records, acknowledged once the last one is persisted, and a new
owner's first time tick ends a sequence its predecessor left unfinished. What could
go wrong is exactly what this scenario aims at: an owner that dies or is fenced after
some chunks of a message and before the others. A reader must then never be handed
the part that landed, and every message that was acknowledged must come back whole.

Three nodes (node 1 runs the oracle and never owns the channel); the channel lives on
node 2 or 3. Two writers append large messages (several MiB, so two to four chunks
each) one at a time, never retried, and two more append small ones, all to the node
they believe owns the channel. Each round waits until a Pulsar reader on the topic
sees the first chunk of a message, then at once kills the owner with SIGKILL (and
assigns the channel to the other node), or assigns it to the other node while the
owner is still alive (it is fenced between chunks); the killed node restarts.

Afterwards a reader of the whole channel through the node (``Consume``) is held to the
log, and both to what the writers were told: the history checker's ``ack-*`` rules
(every acknowledged message in the log, at its id, with its payload), its
``delivered-changed`` rule (nothing handed to a reader that is not a whole message
of the log: no part of a cut sequence) and ``ack-undelivered`` (every acknowledged
message handed over). Payloads above :data:`FINGERPRINT_ABOVE` are checked by a
fingerprint (their size and SHA-256) instead of their bytes, in the log, in the
acknowledgements and in the deliveries alike: the checker keeps every message it
reads, and a run's large messages would otherwise all sit in memory at once.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import grpc
import pulsar
from pulsar import asyncio as pulsar_asyncio

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId
from streamwal.adaptors.pulsar.opener import client_logger
from streamwal.adaptors.pulsar.scanner import to_backend_message
from streamwal.errors import CorruptedChunkError, DecodeError, UnsupportedLogFormatError
from streamwal.node.client import NodeClient, policy
from streamwal.node.limits import grpc_message_limit
from streamwal.node.outcome import write_outcome
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.verify.acks import Ack, Delivery, Failure, digest
from streamwal.verify.history import check_history
from streamwal.wal.backend import BackendMessage
from streamwal.wal.chunking import KEY_CHUNK_ID, KEY_CHUNK_INDEX, ChunkAssembler
from streamwal.wal.message import MessageType, MutableMessage, decode_entry
from streamwal.wal.message.frame import CHUNK_HEADER, FORMAT_PROPERTY, encode_pack, is_chunk
from streamwal_lab.chaos.auth import chaos_channel
from streamwal_lab.chaos.env import ChaosEnv
from streamwal_lab.chaos.result import ScenarioResult
from streamwal_lab.chaos.scenarios.common import assign, keep_flowing, tso_group
from streamwal_lab.chaos.traffic import CHANNEL_OPTIONS, EXPECTED_CODES, Traffic

__all__ = ["FAULTS", "FINGERPRINT_ABOVE", "LARGE_SIZES", "fingerprint", "run"]

MiB = 1024 * 1024
FAULTS = ("kill-9-owner", "takeover")
LARGE_SIZES = (6 * MiB, 12 * MiB)
"""The range of a large message's size: above the stock broker's 5 MiB, so two or
three chunks; two writers, so at most two large appends in flight."""
LARGE_WRITERS = 2
FINGERPRINT_ABOVE = 64 * 1024
_CHUNK_WAIT_S = 20.0


def fingerprint(payload: bytes) -> bytes:
    """What the checker is given for ``payload``: itself if small, else its size and
    SHA-256 (a part of it, or another payload, has another fingerprint)."""
    if len(payload) <= FINGERPRINT_ABOVE:
        return payload
    return b"large:%d:%s" % (len(payload), hashlib.sha256(payload).hexdigest().encode())


def _fingerprinted(entry: BackendMessage) -> BackendMessage:
    """``entry`` with its messages' payloads fingerprinted: in log format v1 the entry's
    payload is the message's; in v2 the messages are inside the WAL's frame, which is
    written again around their fingerprints (ids, stamps and properties unchanged)."""
    if FORMAT_PROPERTY not in entry.properties:
        return BackendMessage(entry.message_id, fingerprint(entry.payload), entry.properties)
    if len(entry.payload) <= FINGERPRINT_ABOVE:
        return entry
    try:
        msgs = decode_entry(entry, PulsarMessageId.from_bytes)
    except (DecodeError, UnsupportedLogFormatError):
        return entry  # the checker reports it as it is
    first = msgs[0]
    confirms_itself = (
        first.type is MessageType.TIME_TICK and first.last_confirmed == first.message_id
    )
    stamped = [
        (
            MutableMessage(
                m.type,
                fingerprint(m.payload),
                vchannel=m.vchannel,
                properties=m.properties,
                version=m.version,
                producer_id=m.producer_id,
                sequence=m.sequence,
                txn_id=m.txn_id,
            ),
            m.time_tick,
        )
        for m in msgs
    ]
    confirmed = None if confirms_itself else first.last_confirmed
    frame = encode_pack(stamped, confirmed, first.source, first.term)
    return BackendMessage(entry.message_id, frame, entry.properties)


def _large_payload(header: bytes, size: int) -> bytes:
    """Unique per message all along (a chunk of one message cannot pass for another's),
    and cheap: a pattern of the header's hash, not random bytes."""
    pattern = hashlib.sha256(header).digest() * (size // 32 + 1)
    return header + pattern[: size - len(header)]


class _LargeWriters:
    """Writers of large messages, like :class:`~streamwal_lab.chaos.traffic.Traffic`'s
    (one append at a time, never retried, on to the next node after a failure), with a
    transport sized for them; acknowledgements and failures carry fingerprints."""

    def __init__(self, env: ChaosEnv, channel: str, addresses: list[str]) -> None:
        self._env = env
        self.channel = channel
        self.addresses = addresses
        self.acks: list[Ack] = []
        self.failures: list[Failure] = []
        self.codes: dict[str, int] = {}
        self.unexpected: list[str] = []
        self.bytes_acked = 0
        self._target = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        limit = grpc_message_limit()
        options = [
            *CHANNEL_OPTIONS,
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
        ]
        self._channels = {a: chaos_channel(a, options=options) for a in addresses}

    def prefer(self, address: str) -> None:
        self._target = self.addresses.index(address)

    async def start(self) -> None:
        for worker in range(LARGE_WRITERS):
            self._tasks.append(asyncio.create_task(self._run(worker), name=f"large-{worker}"))

    async def _run(self, worker: int) -> None:
        rng = self._env.rng
        seq = 0
        failures = 0
        while not self._stop.is_set():
            address = self.addresses[self._target % len(self.addresses)]
            header = f"{self.channel}/large{worker}/{seq}/".encode()
            seq += 1
            payload = _large_payload(header, rng.randint(*LARGE_SIZES))
            size, print_ = len(payload), digest(fingerprint(payload))
            request = pb.ProduceRequest(
                pchannel=self.channel, message=pb.Message(type="insert", payload=payload)
            )
            del payload
            stub = pb_grpc.StreamingNodeStub(self._channels[address])
            try:
                acked = await stub.Produce(request, timeout=30.0)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                self.codes[code.name] = self.codes.get(code.name, 0) + 1
                if code not in EXPECTED_CODES:
                    self.unexpected.append(f"{address}: {code.name} {exc.details()}")
                self.failures.append(Failure(print_, write_outcome(exc).value))
                failures += 1
                if self.addresses[self._target % len(self.addresses)] == address:
                    self._target += 1
                await asyncio.sleep(min(0.5, 0.05 * failures) * rng.uniform(0.5, 1.5))
                continue
            finally:
                del request
            failures = 0
            self.acks.append(Ack(acked.message_id, acked.time_tick, print_))
            self.bytes_acked += size
            # paced: each round needs one in flight, not a flood the check must read back
            await asyncio.sleep(rng.uniform(0.3, 1.0))

    async def stop(self) -> None:
        self._stop.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=40)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks = []
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()


async def _first_chunk(client: Any, topic: str, timeout: float) -> bool:
    """Wait until a first chunk of a message lands on ``topic`` (read from now on):
    the moment its owner is between that chunk and the next."""
    reader = await client.create_reader(topic, pulsar.MessageId.latest, receiver_queue_size=4)
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await reader.read_next()
                props = message.properties()
                if KEY_CHUNK_ID in props and props.get(KEY_CHUNK_INDEX) == "0":
                    return True  # log format v1
                data = message.data()
                if is_chunk(data) and CHUNK_HEADER.unpack_from(data)[5] == 0:
                    return True  # log format v2: the index in the chunk header
    except TimeoutError:
        return False
    finally:
        await reader.close()


async def _log(pulsar_url: str, topic: str, channel: str) -> tuple[list[BackendMessage], int]:
    """The channel's log rebuilt (as ``verify`` reads it), large payloads fingerprinted
    as they are read; and how many chunk sequences were cut (dropped, or still open at
    the end). Raises :class:`CorruptedChunkError` as a reader would."""
    client = pulsar_asyncio.Client(pulsar_url, operation_timeout_seconds=30, logger=client_logger())
    assembler = ChunkAssembler(channel)
    entries: list[BackendMessage] = []
    try:
        reader = await client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=8)
        while await asyncio.wait_for(reader.has_message_available(), 30):
            raw = to_backend_message(await asyncio.wait_for(reader.read_next(), 30))
            msg = assembler.feed(raw)
            if msg is not None:
                entries.append(_fingerprinted(msg))
        await reader.close()
    finally:
        await client.close()
    return entries, assembler.dropped + (0 if assembler.idle else 1)


def _payloads(entries: list[BackendMessage]) -> list[bytes]:
    """The (fingerprinted) payloads of the messages in ``entries``: in v2 they are
    inside the WAL's frame, one or more an entry."""
    out: list[bytes] = []
    for entry in entries:
        try:
            out += [m.payload for m in decode_entry(entry, PulsarMessageId.from_bytes)]
        except (DecodeError, UnsupportedLogFormatError):
            continue  # not a message of the WAL's: the checker reports it
    return out


async def _deliveries(address: str, channel: str, timeout: float = 120.0) -> list[Delivery]:
    """What ``Consume`` of the whole channel hands over, up to a sentinel appended now."""
    sentinel = f"{channel}/sentinel".encode()
    handed: list[Delivery] = []
    async with NodeClient(address, timeout=30, tracing=False) as client:
        await client.produce(channel, sentinel)
        async with asyncio.timeout(timeout):
            async for message in client.consume(channel, policy("all")):
                handed.append(Delivery(message.message_id, digest(fingerprint(message.payload))))
                if message.payload == sentinel:
                    return handed
    raise RuntimeError(f"the read of {channel!r} ended before its sentinel")


async def run(env: ChaosEnv, rounds: int) -> ScenarioResult:
    result = ScenarioResult("large-messages")
    nodes = await tso_group(env, 3)
    movers = nodes[1:]
    addresses = [n.address for n in movers]
    channel = env.name("large")
    topic = PulsarConfig(service_url=env.pulsar_url).topic(channel)
    owner = 0
    answer = await assign(addresses[owner], channel)
    result.expect(not isinstance(answer, grpc.StatusCode), f"first assign failed: {answer}")
    small = env.traffic(channel, addresses, workers=2, pause=0.02)
    large = _LargeWriters(env, channel, addresses)
    for writer in (small, large):
        writer.prefer(addresses[owner])
    done: dict[str, int] = {}
    timed = 0
    watcher = pulsar_asyncio.Client(env.pulsar_url, logger=client_logger())
    try:
        await small.start()
        await large.start()
        for round_ in range(rounds):
            await keep_flowing(result, small, addresses[owner], f"round {round_}, before")
            fault = FAULTS[round_ % len(FAULTS)]
            if await _first_chunk(watcher, topic, _CHUNK_WAIT_S):
                timed += 1
            victim, survivor = movers[owner], movers[1 - owner]
            if fault == "kill-9-owner":
                await victim.kill()
            answer = await assign(survivor.address, channel)
            if isinstance(answer, grpc.StatusCode):
                result.problems.append(f"round {round_}: {fault}: assign: {answer.name}")
            owner = 1 - owner
            for writer in (small, large):
                writer.prefer(addresses[owner])
            done[fault] = done.get(fault, 0) + 1
            result.faults += 1
            await keep_flowing(result, small, addresses[owner], f"round {round_}, after")
            if fault == "kill-9-owner":
                await victim.start()
            result.rounds += 1
        large_before = len(large.acks)
        more = await _wait(lambda: len(large.acks) > large_before, 60)
        result.expect(more, "no large message was acknowledged after the last fault")
    finally:
        await watcher.close()
        await large.stop()  # not the environment's traffic: stopped here, whatever happened
    await small.stop()
    await _check(env, result, small, large, addresses[owner], topic)
    result.figures.update(
        {
            "faults": done,
            "faults timed on a first chunk": timed,
            "large appends acknowledged": len(large.acks),
            "large MiB acknowledged": round(large.bytes_acked / MiB, 1),
            "large appends failed": len(large.failures),
            "small appends acknowledged": len(small.acks),
            "codes": {**dict(small.codes), **{f"large {k}": v for k, v in large.codes.items()}},
        }
    )
    return result


async def _wait(condition: Any, timeout: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def _check(
    env: ChaosEnv,
    result: ScenarioResult,
    small: Traffic,
    large: _LargeWriters,
    owner: str,
    topic: str,
) -> None:
    """Hold the log and a reader's deliveries to the writers' answers (module)."""
    channel = small.channel
    unexpected = small.unexpected + large.unexpected
    result.expect(not unexpected, f"unexpected codes {unexpected[:3]}")
    result.expect(bool(small.acks), "no small append was acknowledged")
    result.expect(bool(large.acks), "no large append was acknowledged")
    handed = await _deliveries(owner, channel)
    try:
        entries, cut = await _log(env.pulsar_url, topic, channel)
    except CorruptedChunkError as exc:
        result.violations.append(f"{channel}: [chunk-corrupted] {exc}")
        return
    report = check_history(
        entries,
        PulsarMessageId.from_bytes,
        [*small.acks, *large.acks],
        [*small.failures, *large.failures],
        deliveries=handed,
    )
    result.absorb(channel, report)
    large_prints = {a.digest for a in large.acks}
    whole = sum(1 for p in _payloads(entries) if len(p) != 0 and digest(p) in large_prints)
    result.figures.update(
        {
            "chunked messages cut between chunks": cut,
            "large acknowledged and whole in the log": whole,
            "messages delivered by Consume": report.deliveries_checked,
        }
    )
