"""A small asyncio TCP proxy that injects network faults, for tests, chaos runs and the demo.

Modes: ``pass`` (forward), ``refuse`` (accept and close at once: the peer sees a
reset), ``blackhole`` (accept and never answer: the peer times out), plus an added
``latency`` per forwarded chunk. Switching to ``refuse`` or ``blackhole`` also cuts
the connections already open, as a network partition would; :meth:`FaultProxy.reset`
cuts them once and keeps forwarding. ``drop_answers``: requests still reach the
target but what it answers is discarded; with a :meth:`reset` once the target has
acted, that is an ambiguous failure (done, and the answer lost). Loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Literal

from streamwal.lifecycle import Startable

__all__ = ["FaultProxy", "Mode"]

_log = logging.getLogger(__name__)

Mode = Literal["pass", "refuse", "blackhole"]


class FaultProxy(Startable):
    """``async with FaultProxy(target_port) as proxy``; connect to ``proxy.port``."""

    def __init__(
        self, target_port: int, *, target_host: str = "127.0.0.1", listen_port: int = 0
    ) -> None:
        self.target = (target_host, target_port)
        self._listen_port = listen_port
        self.mode: Mode = "pass"
        self.latency = 0.0
        self.drop_answers = False
        self.connections = 0
        self.refused = 0
        self.resets = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("proxy not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url_host(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._listen_port)

    def set_mode(self, mode: Mode, latency: float | None = None) -> None:
        self.mode = mode
        if latency is not None:
            self.latency = latency
        if mode != "pass":
            self._cut()
        _log.info("fault proxy %s -> %s: %s", self.port, self.target[1], mode)

    def reset(self) -> None:
        """Abort every open connection (both sides see a reset); new ones still pass."""
        self.resets += 1
        self._cut()
        _log.info("fault proxy %s -> %s: connections reset", self.port, self.target[1])

    def _cut(self) -> None:
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                transport = writer.transport
                transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            self.refused += 1
            writer.transport.abort()
            return
        if self.mode == "blackhole":
            self.refused += 1
            self._writers.add(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        self._writers.update((writer, up_writer))
        for src, dst, answers in ((reader, up_writer, False), (up_reader, writer, True)):
            task = asyncio.create_task(self._pipe(src, dst, answers))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, answers: bool
    ) -> None:
        try:
            while chunk := await src.read(65536):
                if self.mode == "blackhole":
                    return
                if answers and self.drop_answers:
                    continue
                if self.latency:
                    await asyncio.sleep(self.latency)
                dst.write(chunk)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(dst)
            with contextlib.suppress(Exception):
                dst.transport.abort()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._cut()
            await self._server.wait_closed()
            self._server = None
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
