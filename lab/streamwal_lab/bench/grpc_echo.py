"""What grpc.aio itself costs on this machine: an echo server shaped like the node's produce calls.

The node suite's ratios put the node against the WAL appending directly; the part of
the gap that is gRPC's own (its per-call and per-message work in two Python processes on
the same cores) is the floor no servicer change can go below. This measures it in the
same run: a child process serves ``Produce``-shaped unary calls and a bidirectional
stream with no work behind them (the reply is a fixed ``ProduceResponse``), and the
bench drives them as it drives the node, with the same request messages, callers and
one call or one stream message in flight per caller. No interceptors on either side.

The same calls can also be answered after a wait (``set_delay``): the WAL's own latency
of the run, with none of its work. A node whose WAL cost no CPU at all would still pay
that wait plus gRPC's round trip for each append of a caller with one in flight, so the
closed loop of those calls is the most such a node can reach against the WAL: the
ceiling of the latency-bound targets on this machine. The wait is a timer, which the
event loop fires late (``epoll`` rounds its timeout up to the millisecond); the server
learns its lateness and asks for that much less, so the mean wait matches the delay
asked for, and ``set_delay`` reports the mean it kept.

``EchoServer(traced=True)`` traces as a node does: the node's server interceptor makes
a SERVER span per call (exported over OTLP when an endpoint is given, else made and
dropped), each handler tags it with a node id, and the client side makes the CLIENT
spans ``NodeClient`` makes (:class:`~streamwal.node.client.traced.TracedChannel`). The
node's targets are judged with its tracing on, so their ceiling is measured with it
on too.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import struct
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from opentelemetry import trace

from streamwal.lifecycle import Startable
from streamwal.node.client.traced import TracedChannel, TracedUnary
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.telemetry import NODE_ID_ATTRIBUTE
from streamwal_lab.stack.process import die_with_parent

__all__ = ["SERVICE_NAME", "EchoServer", "EchoStream"]

_SERVICE = "streamwal.bench.Echo"
#: the traced server's ``service.name``
SERVICE_NAME = "streamwal-bench-echo"
_READY = re.compile(rb"ready on (\S+)")
_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0
# what a node answers an append with: an id, its text and a time tick
_REPLY: bytes = pb.ProduceResponse(
    message_id=b"\x00" * 20, message_id_text="1234:5678:9", time_tick=465_000_000_000_000_000
).SerializeToString()


def _same(data: bytes) -> bytes:
    return data


class _Delay:
    """The wait before a delayed answer: ``target`` on average, whatever the timer's lateness."""

    def __init__(self) -> None:
        self.target = 0.0
        self._late = 0.0  # how much later than asked the timer fires, learnt
        self._waited = 0.0
        self._count = 0

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.sleep(max(0.0, self.target - self._late))
        waited = loop.time() - started
        self._late += 0.05 * (waited - self.target)
        self._waited += waited
        self._count += 1

    def reset(self, target: float) -> float:
        """Set the next period's target; the mean wait of the period that ends. The
        lateness is learnt again each period: the timer's lateness depends on the load
        of the period (a busy loop at many callers fires later than an idle one), and a
        lateness learnt at another load made a short period wait up to half less."""
        mean = self._waited / self._count if self._count else 0.0
        self.target, self._waited, self._count, self._late = target, 0.0, 0, 0.0
        return mean


_DELAY = _Delay()


def _tag_span() -> None:
    """What the node's servicer does on every call's span (one attribute)."""
    trace.get_current_span().set_attribute(NODE_ID_ATTRIBUTE, 1)


async def _unary(_request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    _tag_span()
    return _REPLY


async def _stream(requests: object, _context: grpc.aio.ServicerContext[bytes, bytes]) -> object:
    _tag_span()
    async for _ in requests:  # type: ignore[attr-defined]
        yield _REPLY


async def _unary_after(_request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    _tag_span()
    await _DELAY.wait()
    return _REPLY


async def _stream_after(
    requests: object, _context: grpc.aio.ServicerContext[bytes, bytes]
) -> object:
    _tag_span()
    async for _ in requests:  # type: ignore[attr-defined]
        await _DELAY.wait()
        yield _REPLY


async def _set_delay(request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return struct.pack("<d", _DELAY.reset(struct.unpack("<d", request)[0]))


def _interceptors(
    traced: bool, otlp_endpoint: str, service_name: str
) -> list[grpc.aio.ServerInterceptor]:
    """The node's tracing (its interceptor, a provider exporting as its does), or none."""
    if not traced:
        return []
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from streamwal.node.server_tracing import ServerInterceptor
    from streamwal.node.telemetry import span_exporter

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if otlp_endpoint:
        exporter = span_exporter(otlp_endpoint)
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    trace.set_tracer_provider(provider)
    return [ServerInterceptor(tracer_provider=provider)]


async def _serve(traced: bool, otlp_endpoint: str, service_name: str) -> None:
    server = grpc.aio.server(
        interceptors=_interceptors(traced, otlp_endpoint, service_name),
        # the large-message cells send it what they send a node, whatever the size
        options=[("grpc.max_receive_message_length", -1)],
    )
    handler = grpc.method_handlers_generic_handler(
        _SERVICE,
        {
            "Produce": grpc.unary_unary_rpc_method_handler(_unary, _same, _same),
            "ProduceStream": grpc.stream_stream_rpc_method_handler(_stream, _same, _same),
            "ProduceAfter": grpc.unary_unary_rpc_method_handler(_unary_after, _same, _same),
            "ProduceStreamAfter": grpc.stream_stream_rpc_method_handler(
                _stream_after, _same, _same
            ),
            "SetDelay": grpc.unary_unary_rpc_method_handler(_set_delay, _same, _same),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    # its own handlers, the signals unblocked: a child inherits a signal ignored (from
    # a shell's background job) or blocked (from the thread that started it), and
    # would only end when killed, without flushing its spans
    loop = asyncio.get_running_loop()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    stopping: list[asyncio.Future[None]] = []  # referenced while it runs
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(
            sig, lambda: stopping.append(asyncio.ensure_future(server.stop(None)))
        )
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

    def __init__(self, channel: TracedChannel, *, delayed: bool = False) -> None:
        name = "ProduceStreamAfter" if delayed else "ProduceStream"
        method = channel.stream_stream(
            f"/{_SERVICE}/{name}", request_serializer=_same, response_deserializer=_same
        )
        self._call = method()

    async def append(self, payload: bytes) -> object:
        await self._call.write(_request(payload))
        return pb.ProduceResponse.FromString(await self._call.read())

    async def close(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            await self._call.done_writing()
        self._call.cancel()


_T = TypeVar("_T")


def _inside(part: _T | None) -> _T:
    """``part`` of a started server (its channel, a method), which is ``None`` outside
    the ``async with`` block."""
    if part is None:
        raise RuntimeError("EchoServer used outside its async with block")
    return part


class EchoServer(Startable):
    """``async with EchoServer() as echo``: the server in a child process, and a channel
    to it; ``echo.unary(payload)`` and ``echo.open_stream()`` as the node's client uses
    them (``unary_after`` and ``open_stream(delayed=True)`` answer after the wait
    ``set_delay`` set). ``traced``: both ends trace as a node and ``NodeClient`` do,
    exporting to ``otlp_endpoint`` if given (see the module), as ``service_name``.
    Leaving the block closes the channel and stops the child."""

    def __init__(
        self,
        *,
        traced: bool = False,
        otlp_endpoint: str | None = None,
        service_name: str = SERVICE_NAME,
    ) -> None:
        self._traced = traced
        self._otlp_endpoint = otlp_endpoint or ""
        self._service_name = service_name
        self._proc: asyncio.subprocess.Process | None = None
        self._channel: grpc.aio.Channel | None = None
        self._calls: TracedChannel | None = None
        self._unary: TracedUnary | None = None
        self._unary_after: TracedUnary | None = None
        self._set_delay: TracedUnary | None = None

    async def start(self) -> None:
        """The child and a channel to it; one that fails leaves no child behind, as
        :class:`~streamwal.lifecycle.Startable` asks of a start."""
        args = ["--traced", self._otlp_endpoint, self._service_name] if self._traced else []
        self._proc = await asyncio.create_subprocess_exec(
            *die_with_parent(),
            sys.executable,
            "-m",
            __name__,
            *args,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), _START_TIMEOUT_S)  # type: ignore[union-attr]
            found = _READY.search(line)
            if found is None:
                raise RuntimeError(f"the gRPC echo server did not start: {line!r}")
            self._channel = grpc.aio.insecure_channel(found.group(1).decode())
            tracer = trace.get_tracer(__name__) if self._traced else None
            self._calls = TracedChannel(self._channel, tracer, None)
            self._unary, self._unary_after, self._set_delay = (
                self._calls.unary_unary(
                    f"/{_SERVICE}/{name}", request_serializer=_same, response_deserializer=_same
                )
                for name in ("Produce", "ProduceAfter", "SetDelay")
            )
        except BaseException:
            await self.close()
            raise

    @property
    def pid(self) -> int:
        """The server's process id, inside the block (its CPU time is read from it)."""
        return _inside(self._proc).pid

    async def unary(self, payload: bytes) -> object:
        return pb.ProduceResponse.FromString(await _inside(self._unary)(_request(payload)))

    async def unary_after(self, payload: bytes) -> object:
        return pb.ProduceResponse.FromString(await _inside(self._unary_after)(_request(payload)))

    async def set_delay(self, seconds: float) -> float:
        """Delayed answers wait ``seconds`` on average from now on; the mean wait they
        had since the previous call (0 if none was answered)."""
        answer = await _inside(self._set_delay)(struct.pack("<d", seconds))
        waited: float = struct.unpack("<d", answer)[0]
        return waited

    async def timed_after(
        self, delay_s: float, timed: Callable[[], Awaitable[dict[str, float]]]
    ) -> dict[str, float]:
        """``timed()`` (a timed run of delayed calls) with their answers waiting
        ``delay_s``; its figures, with ``delay_ms`` the mean wait they kept."""
        await self.set_delay(delay_s)
        try:
            figures = await timed()
        finally:
            waited = await self.set_delay(0.0)
        figures["delay_ms"] = round(waited * 1000, 3)
        return figures

    def open_stream(self, *, delayed: bool = False) -> EchoStream:
        return EchoStream(_inside(self._calls), delayed=delayed)

    async def close(self) -> None:
        """Idempotent: a start that failed half-way calls it, and so does leaving the block."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        # SIGTERM ends the server's loop, and the exit flushes the spans it still holds
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), _STOP_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()


if __name__ == "__main__":
    # ``--traced ENDPOINT SERVICE`` (ENDPOINT may be empty: spans made and dropped)
    _traced = sys.argv[1:2] == ["--traced"] and len(sys.argv) == 4
    _endpoint, _service = sys.argv[2:4] if _traced else ("", SERVICE_NAME)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(_traced, _endpoint, _service))
