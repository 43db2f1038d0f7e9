"""What grpc.aio itself costs on this machine: an echo server shaped like the node's produce calls.

The node suite's ratios put the node against the WAL appending directly; the part of
the gap that is gRPC's own (its per-call and per-message work in two Python processes on
the same cores) is the floor no servicer change can go below. This measures it in the
same run: a child process serves ``Produce``-shaped unary calls and a bidirectional
stream with no work behind them (the reply is a fixed ``ProduceResponse``), and the
bench drives them as it drives the node, with the same request messages, callers and
one call or one stream message in flight per caller. No interceptors on either side.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from types import TracebackType

import grpc

from streamwal.node.proto import streaming_pb2 as pb

__all__ = ["EchoServer", "EchoStream"]

_SERVICE = "streamwal.bench.Echo"
_READY = re.compile(rb"ready on (\S+)")
_START_TIMEOUT_S = 30.0
# what a node answers an append with: an id, its text and a time tick
_REPLY: bytes = pb.ProduceResponse(
    message_id=b"\x00" * 20, message_id_text="1234:5678:9", time_tick=465_000_000_000_000_000
).SerializeToString()


def _same(data: bytes) -> bytes:
    return data


async def _unary(_request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return _REPLY


async def _stream(requests: object, _context: grpc.aio.ServicerContext[bytes, bytes]) -> object:
    async for _ in requests:  # type: ignore[attr-defined]
        yield _REPLY


async def _serve() -> None:
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        _SERVICE,
        {
            "Produce": grpc.unary_unary_rpc_method_handler(_unary, _same, _same),
            "ProduceStream": grpc.stream_stream_rpc_method_handler(_stream, _same, _same),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"ready on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


def _request(payload: bytes) -> bytes:
    """The bytes NodeClient sends for one append (built per call, as it does)."""
    message = pb.Message(type="insert", payload=payload)
    request = pb.ProduceRequest(pchannel="bench", message=message)
    data: bytes = request.SerializeToString()
    return data


class EchoStream:
    """One stream; ``append`` has one message in flight (one caller per stream)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        method = channel.stream_stream(
            f"/{_SERVICE}/ProduceStream", request_serializer=_same, response_deserializer=_same
        )
        self._call = method()

    async def append(self, payload: bytes) -> object:
        await self._call.write(_request(payload))
        return pb.ProduceResponse.FromString(await self._call.read())

    async def close(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            await self._call.done_writing()
        self._call.cancel()


class EchoServer:
    """``async with EchoServer() as echo``: the server in a child process, and a channel
    to it; ``echo.unary(payload)`` and ``echo.open_stream()`` as the node's client uses
    them. Leaving the block closes the channel and stops the child."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._channel: grpc.aio.Channel | None = None
        self._unary: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] | None = None

    async def __aenter__(self) -> EchoServer:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", __name__, stdout=asyncio.subprocess.PIPE
        )
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), _START_TIMEOUT_S)  # type: ignore[union-attr]
            found = _READY.search(line)
            if found is None:
                raise RuntimeError(f"the gRPC echo server did not start: {line!r}")
            self._channel = grpc.aio.insecure_channel(found.group(1).decode())
            self._unary = self._channel.unary_unary(
                f"/{_SERVICE}/Produce", request_serializer=_same, response_deserializer=_same
            )
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop()

    async def unary(self, payload: bytes) -> object:
        if self._unary is None:
            raise RuntimeError("EchoServer used outside its async with block")
        return pb.ProduceResponse.FromString(await self._unary(_request(payload)))

    def open_stream(self) -> EchoStream:
        if self._channel is None:
            raise RuntimeError("EchoServer used outside its async with block")
        return EchoStream(self._channel)

    async def _stop(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve())
