"""Count the hops of one unary ``Produce``: the project's function calls from the node's
gRPC handler to the backend's write, and until the answer is built.

A "hop" is one call of a function defined in the product (``streamwal/``,
``adaptors/``, ``tso/``), counted with ``sys.setprofile`` while one ``Produce`` runs
through the real servicer and gRPC server on the in-process backend (after a warm-up
append, so opening and first-time-tick work is not counted). Generated protobuf
modules are left out. Prints the count to the backend's write, the count for the whole
call, and with ``--list`` each call in order.

    .venv/bin/python scripts/produce_hops.py [--list]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamwal.adaptors.memory import MemoryLogStore  # noqa: E402
from streamwal.node.client import NodeClient  # noqa: E402
from tests.node.memory_node import CounterSource, memory_node  # noqa: E402

PRODUCT = tuple(str(ROOT / d) for d in ("streamwal", "adaptors", "tso"))
CHANNEL = "hops"
CLIENT_FILES = ("node/client.py", "node/client_errors.py", "node/outcome.py")


class _Hops:
    """The product's calls, in order, between the handler's entry and the answer."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._frames: set[int] = set()
        self._alive: list[FrameType] = []
        self.active = False
        self.to_write: int | None = None

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        path = str(Path(code.co_filename).resolve())
        if not path.startswith(PRODUCT) or "_pb2" in path:
            return
        caller = frame.f_back
        if path.endswith(CLIENT_FILES) or (
            caller is not None and caller.f_code.co_filename.endswith(CLIENT_FILES)
        ):
            return  # the client runs in this process too: only the node's side counts
        if code.co_name == "Produce" and path.endswith(("servicer.py", "batching.py")):
            self.active = True
        if not self.active or id(frame) in self._frames:
            return  # before the handler, or a coroutine resumed (not a new call)
        self._frames.add(id(frame))
        self._alive.append(frame)  # kept alive: ids stay unique while counting
        self.calls.append(f"{Path(path).relative_to(ROOT)}:{code.co_qualname}")
        if (
            self.to_write is None
            and "adaptors/memory" in path
            and code.co_name
            in (
                "submit",
                "append",
            )
        ):
            self.to_write = len(self.calls)


async def main(show: bool) -> None:
    hops = _Hops()
    async with (
        memory_node(1, MemoryLogStore(), CounterSource()) as (address, _),
        NodeClient(address, tracing=False) as client,
    ):
        await client.assign(CHANNEL)
        await client.produce(CHANNEL, b"warm-up")
        sys.setprofile(hops.profile)
        try:
            await client.produce(CHANNEL, b"counted")
        finally:
            sys.setprofile(None)
    if show:
        for i, call in enumerate(hops.calls, 1):
            print(f"{i:4}  {call}")
    print(f"product calls to the backend's write: {hops.to_write}")
    print(f"product calls in the whole Produce:   {len(hops.calls)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print each call in order")
    asyncio.run(main(parser.parse_args().list))
