"""One address in front of several brokers' admin APIs, as a load balancer would be.

Each new connection goes to the next broker in turn, so an admin call lands on a
broker that does not own its topic about half the time; that broker answers with a
redirect to the owner. The cluster profile runs it so that the WAL's admin calls meet
what they meet behind an operator's load balancer. Run as
``python -m streamwal_lab.stack.entry LISTEN_PORT TARGET_PORT...`` (loopback only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
from collections.abc import Iterator

__all__ = ["serve"]

HOST = "127.0.0.1"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        writer.write_eof()


async def _forward(
    targets: Iterator[int], client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
) -> None:
    try:
        upstream_r, upstream_w = await asyncio.open_connection(HOST, next(targets))
    except OSError:  # that broker is down: the client sees a reset, as behind a balancer
        client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, upstream_w), _pipe(upstream_r, client_w))
    finally:
        for w in (client_w, upstream_w):
            w.close()


async def serve(listen_port: int, target_ports: list[int]) -> None:
    """Forward connections to ``target_ports`` in turn until cancelled."""
    targets = itertools.cycle(target_ports)
    server = await asyncio.start_server(
        lambda r, w: _forward(targets, r, w), HOST, listen_port, reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("listen_port", type=int)
    parser.add_argument("target_ports", type=int, nargs="+")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen_port, args.target_ports))


if __name__ == "__main__":
    main()
