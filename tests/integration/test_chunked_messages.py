"""Messages larger than the broker's maxMessageSize on the real stack: through the
library and through a node, read back whole by every read path and by a plain Pulsar
reader that follows docs/wire-format.md alone.

Memory: the suite fails a test whose RSS grows by more than 200 MB after teardown,
so each test keeps one copy of its payloads plus a digest of each, drops every read's
copy at once, and the 20 and 64 MiB cases go through the library and through a node
process (not a node in the suite's own process, which would hold every copy).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.node.client import NodeClient, policy
from streamwal.node.config import load_config
from streamwal.server.runtime import Node
from streamwal.tso import InProcessTSO
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import read_topic
from streamwal.verify.history import check_history
from streamwal.wal import DeliveryPolicy, MessageType, MutableMessage, open_read_only, open_wal
from streamwal.wal.chunking import reassemble
from streamwal.wal.message.frame import is_chunk
from streamwal_lab.stack import StackInfo
from tests.doc_snippets import python_block
from tests.node.processes import NodeProcess, stack_environ

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _payload(size: int, seed: int) -> bytes:
    """Incompressible-looking yet cheap bytes (os.urandom of 64 MiB takes a while)."""
    block = os.urandom(MiB)
    return (block * (size // MiB + 1))[:size] if size >= MiB else block[:size] + bytes([seed])


def _doc_code(heading: str) -> dict[str, Any]:
    """The first Python block under ``heading`` in the document, run."""
    code = python_block("docs/wire-format.md", heading)
    namespace: dict[str, Any] = {}
    exec(code.split("\nclient = pulsar.Client(", 1)[0], namespace)  # no example run
    return namespace


def _doc_reassemble() -> Callable[[Iterator[Any]], Iterator[tuple[Any, dict[str, str], bytes]]]:
    """The plain reader's reassembly, taken from the document itself."""
    reassembled: Callable[[Iterator[Any]], Iterator[tuple[Any, dict[str, str], bytes]]] = _doc_code(
        "### Reassembling chunks with pulsar-client only"
    )["reassemble"]
    return reassembled


def _plain_read(service_url: str, topic: str) -> list[tuple[int, int, str, str]]:
    """(time tick, size, type, sha256) of every whole message, with pulsar-client only."""
    reassembled = _doc_reassemble()
    client = pulsar.Client(service_url, logger=None)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)

        def entries() -> Iterator[tuple[Any, dict[str, str], bytes]]:
            while reader.has_message_available():
                msg = reader.read_next(30_000)
                yield msg.message_id(), msg.properties(), msg.data()

        decode_entry = _doc_code("## Decoding with pulsar-client only")["decode_entry"]
        id_bytes = _doc_code("## Decoding with pulsar-client only")["id_bytes"]
        return [
            (m["time_tick"], len(m["payload"]), m["type"], _sha(m["payload"]))
            for mid, props, data in reassembled(entries())
            for m in decode_entry(id_bytes(mid), props, data)
        ]
    finally:
        client.close()


async def _library_round_trip(
    stack: StackInfo, tso: InProcessTSO, channel: str, sizes: list[int]
) -> None:
    config = PulsarConfig(service_url=stack.pulsar_url)
    payloads = []
    for i, size in enumerate(sizes):
        payloads.append(b"small-%d" % i)
        payloads.append(_payload(size, i))
    digests = [_sha(p) for p in payloads]
    async with PulsarOpener(config) as opener, PulsarOpener(config) as reader_opener:
        wal = await open_wal(opener, channel, tso.allocator(), 1)
        try:
            tail = await wal.read(DeliveryPolicy.latest())
            results = []
            acks = []
            for p in payloads:
                result = await wal.append(MutableMessage(MessageType.INSERT, p))
                results.append(result)
                acks.append(Ack(result.message_id.to_bytes(), result.time_tick, digest(p)))
            del payloads
            gc.collect()
            expected = [
                (r.message_id, r.time_tick, d) for r, d in zip(results, digests, strict=True)
            ]

            async def read_all(scanner: Any) -> list[tuple[Any, int, str]]:
                got = []
                async with asyncio.timeout(120):
                    async for msg in scanner:
                        if msg.type is MessageType.INSERT:
                            got.append((msg.message_id, msg.time_tick, _sha(msg.payload)))
                        if len(got) == len(expected):
                            break
                await scanner.close()
                return got

            assert await read_all(tail) == expected  # the write-ahead buffer
            assert tail.source == "buffer"
            readonly = await open_read_only(reader_opener, channel)
            try:
                assert await read_all(await readonly.read()) == expected  # catch-up
                big = results[-1].message_id
                from_big = await readonly.read(DeliveryPolicy.start_from(big))
                assert (await read_all_one(from_big))[0] == expected[-1][0]
                if len(expected) > 2:  # a read after a chunked message
                    after = DeliveryPolicy.start_after(results[1].message_id)
                    assert (await read_all_one(await readonly.read(after)))[0] == expected[2][0]
            finally:
                await readonly.close()
        finally:
            await wal.close()
    topic = config.topic(channel)
    raw = await read_topic(stack.pulsar_url, topic)
    assert sum(is_chunk(e.payload) for e in raw) > len(sizes)  # chunked records (format v2)
    report = check_history(
        list(reassemble(channel, raw)), opener.message_id_from_bytes, acks, []
    )  # what verify checks
    del raw
    gc.collect()
    assert report.ok, report
    plain = await asyncio.to_thread(_plain_read, stack.pulsar_url, topic)
    inserts = [(tt, d) for tt, _, kind, d in plain if kind == "Insert"]
    assert inserts == [(tt, d) for _, tt, d in expected]


async def read_all_one(scanner: Any) -> list[Any]:
    """The id of the next insert."""
    async with asyncio.timeout(60):
        async for msg in scanner:
            if msg.type is MessageType.INSERT:
                await scanner.close()
                return [msg.message_id]
    raise AssertionError("no insert")


async def test_library_round_trips_1_5_6_20_mib(
    stack: StackInfo, tso: InProcessTSO, unique: str
) -> None:
    await _library_round_trip(stack, tso, f"chunks-lib-{unique}", [MiB, 5 * MiB, 6 * MiB, 20 * MiB])


async def test_library_round_trip_64_mib(stack: StackInfo, tso: InProcessTSO, unique: str) -> None:
    await _library_round_trip(stack, tso, f"chunks-64-{unique}", [64 * MiB])


async def _produce_beside_small(
    client: NodeClient, channel: str, sizes: list[int], *, numbered: bool = False
) -> list[tuple[bytes, int, str]]:
    """For each size a small message, then one of that size: (message id, time tick,
    sha256) of each, in order; each payload is dropped once sent, as the module's
    memory bound wants. ``numbered``: each carries property ``i``, its size's index."""
    expected = []
    for i, size in enumerate(sizes):
        for payload in (b"small-%d" % i, _payload(size, i)):
            properties = {"i": str(i)} if numbered else None
            acked = await client.produce(channel, payload, properties=properties)
            expected.append((acked.message_id, acked.time_tick, _sha(payload)))
            del payload
        gc.collect()
    return expected


@pytest.fixture
async def node(stack: StackInfo, etcd_prefix: Callable[[str], str]) -> AsyncIterator[Node]:
    config = load_config(environ=stack_environ(stack, 41, etcd_prefix("chunk-node")))
    async with Node(config) as running:
        yield running


async def test_node_round_trips_beside_small_messages(node: Node, unique: str) -> None:
    channel = f"chunks-node-{unique}"
    # 20 and 64 MiB go through a node process (below): an in-process node holds every
    # copy (gRPC buffers, the write-ahead buffer, the read-ahead) in the suite's process
    sizes = [MiB, 5 * MiB, 6 * MiB]
    async with NodeClient(node.address, timeout=120) as client:
        await client.assign(channel)
        expected = await _produce_beside_small(client, channel, sizes, numbered=True)

        single: list[tuple[bytes, int, str]] = []
        async for m in client.consume(channel, policy("all"), timeout=120):
            if m.type.lower() == "insert":
                assert m.properties == {"i": str(len(single) // 2)}
                single.append((m.message_id, m.time_tick, _sha(m.payload)))
            if len(single) == len(expected):
                break
        assert single == expected

        batched: list[tuple[bytes, int, str]] = []
        async for frame in client.consume_batches(channel, policy("all"), timeout=120):
            batched.extend(
                (m.message_id, m.time_tick, _sha(m.payload))
                for m in frame
                if m.type.lower() == "insert"
            )
            del frame
            if len(batched) >= len(expected):
                break
        assert batched == expected

        after = policy("start_after", message_id=expected[1][0])  # after the 1 MiB one
        async for m in client.consume(channel, after, timeout=60):
            if m.type.lower() == "insert":
                assert m.message_id == expected[2][0]
                break


async def test_a_node_process_round_trips_20_and_64_mib(
    stack: StackInfo, tmp_path: Path, etcd_prefix: Callable[[str], str], unique: str
) -> None:
    """The largest sizes through a real node process: its copies (gRPC buffers, the
    write-ahead buffer) live in its own process, the suite's holds the client's."""
    process = NodeProcess(
        tmp_path,
        42,
        {
            "pulsar": {"service_url": stack.pulsar_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"mode": "in-process", "key_prefix": etcd_prefix("chunk-proc")},
        },
    )
    channel = f"chunks-proc-{unique}"
    await process.start()
    try:
        async with NodeClient(process.address, timeout=120) as client:
            await client.assign(channel)
            expected = await _produce_beside_small(client, channel, [20 * MiB, 64 * MiB])
            got: list[tuple[bytes, int, str]] = []
            async for m in client.consume(channel, policy("all"), timeout=120):
                if m.type.lower() == "insert":
                    got.append((m.message_id, m.time_tick, _sha(m.payload)))
                del m
                if len(got) == len(expected):
                    break
            assert got == expected
            await client.remove(channel)
    finally:
        assert await process.terminate() == 0
    # a plain reader following docs/wire-format.md rebuilds the same messages
    plain = await asyncio.to_thread(
        _plain_read, stack.pulsar_url, f"persistent://public/default/{channel}"
    )
    assert [sha for _, _, kind, sha in plain if kind == "insert"] == [e[2] for e in expected]
    assert [size for _, size, _, _ in plain if size > MiB] == [20 * MiB, 64 * MiB]
