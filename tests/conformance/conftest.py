"""The ``target`` fixture: the suite once on each target, set up once per module.

``memory`` needs nothing; ``pulsar`` the stack's broker; ``node`` two node processes
on the stack (node 1 with the TSO in-process, node 2 taking timestamps from it),
started once for the module and shared by its tests, each on channels of its own.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryOpener
from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal_lab.stack import StackInfo
from tests.conformance.targets import LibraryTarget, NodeTarget, Target
from tests.node.processes import NodeProcess

#: how many nodes each target offers (owners and readers are placed among them)
NODES = 2


@dataclass(frozen=True)
class _Services:
    """What a target needs of the stack: nothing for ``memory``."""

    kind: str
    stack: StackInfo | None = None
    key_prefix: str = ""
    workdir: Path | None = None


@pytest.fixture(
    scope="module",
    params=[
        "memory",
        pytest.param("pulsar", marks=pytest.mark.integration),
        pytest.param("node", marks=pytest.mark.integration),
    ],
)
def services(request: pytest.FixtureRequest) -> _Services:
    """The stack only for the targets that use it (asked lazily, outside the loop)."""
    if request.param == "memory":
        return _Services("memory")
    stack: StackInfo = request.getfixturevalue("stack")
    if request.param == "pulsar":
        return _Services("pulsar", stack)
    prefixes: Callable[[str], str] = request.getfixturevalue("module_etcd_prefix")
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    return _Services("node", stack, prefixes("conformance"), factory.mktemp("conformance"))


@pytest.fixture(scope="module")
async def target(services: _Services) -> AsyncIterator[Target]:
    unique = uuid.uuid4().hex[:8]
    if services.kind == "memory":
        store = MemoryLogStore()
        memory = LibraryTarget("memory", [MemoryOpener(store) for _ in range(NODES)], unique)
        try:
            yield memory
        finally:
            await memory.close()
        return
    stack = services.stack
    assert stack is not None
    if services.kind == "pulsar":
        openers = [PulsarOpener(PulsarConfig(service_url=stack.pulsar_url)) for _ in range(NODES)]
        for opener in openers:
            await opener.start()
        library = LibraryTarget("pulsar", openers, unique)
        try:
            yield library
        finally:
            await library.close()
        return
    assert services.workdir is not None
    nodes = await _start_nodes(stack, services.workdir, services.key_prefix)
    client = NodeTarget([n.address for n in nodes], unique)
    try:
        yield client
    finally:
        await client.close()
        await asyncio.gather(*(n.terminate() for n in nodes), return_exceptions=True)


async def _start_nodes(stack: StackInfo, workdir: Path, key_prefix: str) -> list[NodeProcess]:
    broker = {"service_url": stack.pulsar_url}
    etcd = {"endpoints": [stack.etcd_endpoint]}
    first = NodeProcess(
        workdir,
        1,
        {"pulsar": broker, "etcd": etcd, "tso": {"mode": "in-process", "key_prefix": key_prefix}},
    )
    await first.start()
    others = [
        NodeProcess(
            workdir,
            node_id,
            {
                "pulsar": broker,
                "etcd": etcd,
                # the oracle's prefix: the channels' terms live under it
                "tso": {
                    "mode": "remote",
                    "remote_addresses": [first.address],
                    "key_prefix": key_prefix,
                },
            },
        )
        for node_id in range(2, NODES + 1)
    ]
    try:
        await asyncio.gather(*(n.start() for n in others))
    except BaseException:
        await asyncio.gather(*(n.terminate() for n in [first, *others]), return_exceptions=True)
        raise
    return [first, *others]
