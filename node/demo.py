"""``streamwal demo``: the main job on the local stack.

Starts the stack, then shows the fence on the real broker: node A owns a channel
and appends; node B opens the same channel for writing; A's next append fails as
fenced, for good; a plain reader shows A's acknowledged appends, then B's.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

from adaptors.pulsar import PulsarConfig, PulsarOpener
from node.stack import Stack
from wal.backend import AccessMode, DeliveryPolicy
from wal.errors import ChannelFencedError

__all__ = ["register"]


def register(sub: Any) -> None:
    demo = sub.add_parser("demo", help="start the local stack and show a takeover on a channel")
    demo.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    return asyncio.run(_demo())


async def _demo() -> int:
    print("== starting the local stack (installs on first use)")
    info = await Stack().up(["etcd", "pulsar"])
    channel = f"demo-{uuid.uuid4().hex[:8]}"
    config = PulsarConfig(service_url=info.pulsar_url)
    async with PulsarOpener(config) as node_a, PulsarOpener(config) as node_b:
        print(f"== node A opens {channel} for writing (exclusive producer = the fence)")
        a = await node_a.open(channel, AccessMode.READ_WRITE)
        started = time.perf_counter()
        await a.ensure_writable()
        first = await a.append(b"A-0", {"who": "A"})
        print(
            f"   first append acknowledged as {first} after "
            f"{(time.perf_counter() - started) * 1000:.0f} ms"
        )
        for i in range(1, 5):
            print(f"   A appended A-{i} -> {await a.append(f'A-{i}'.encode(), {'who': 'A'})}")
        print("== node B opens the same channel for writing: the broker fences A")
        b = await node_b.open(channel, AccessMode.READ_WRITE)
        await b.ensure_writable()
        for i in range(3):
            print(f"   B appended B-{i} -> {await b.append(f'B-{i}'.encode(), {'who': 'B'})}")
        for attempt in range(2):
            try:
                await a.append(b"A-late", {"who": "A"})
                print("   !! A could still append: the fence did not hold")
                return 1
            except ChannelFencedError as exc:
                print(f"   A's append #{attempt + 1} after the takeover: fenced ({exc})")
        print("== reading the whole topic back")
        reader = await b.read(DeliveryPolicy.all())
        for _ in range(8):
            entry = await anext(reader)
            print(f"   {entry.message_id!s:>8}  {entry.payload.decode()}")
        await reader.close()
    print("== done: nothing of A's landed after B's first message")
    return 0
