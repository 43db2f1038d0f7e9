"""The node's HTTP port (``node.metrics_listen``): ``/metrics``, ``/livez``, ``/readyz``.

Kubernetes probes and Prometheus scrapes share one small server, so each answers only
at its own path and anything else is a 404: a probe or scrape pointed at the wrong
path fails loudly instead of reading a 200 that means nothing.

- ``/livez``: 200 while the node's event loop keeps turning (it ticks
  :meth:`Readiness.beat`); 503 when it has not for :data:`STALL_S` seconds (a hung
  loop: restart the process).
- ``/readyz``: 200 ``ready`` when the node can serve (it reached the broker and, in a
  cluster, registered in etcd), else 503 with one line per reason.
- ``/metrics``: the Prometheus exposition of the process's registry, less the series
  of channels this process gave up (:mod:`streamwal.node.metric_scope`).

The server runs on a thread of its own, so it answers while the loop is busy; the
state it reads is a few attributes the loop sets (:class:`Readiness`).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from streamwal.errors import PortInUseError

__all__ = ["STALL_S", "HttpEndpoints", "Readiness", "check_port_free"]

_log = logging.getLogger(__name__)

#: the event loop is called stalled (``/livez`` 503) after this long without a beat
STALL_S = 10.0


class Readiness:
    """Why the node is not ready yet (empty: ready), and the loop's last heartbeat.

    Written from the event loop, read from the HTTP thread: each read takes a copy
    under the lock, so a probe never sees half an update.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blockers: dict[str, str] = {"start": "starting"}
        self._notes: dict[str, str] = {}
        self._beat = time.monotonic()

    def block(self, what: str, why: str) -> None:
        """Not ready because of ``what`` (``broker``, ``etcd``...), explained by ``why``."""
        with self._lock:
            self._blockers[what] = why

    def clear(self, what: str) -> None:
        with self._lock:
            self._blockers.pop(what, None)

    def note(self, what: str, text: str) -> None:
        """Something ``/readyz`` says whether the node is ready or not (a node serving
        insecurely on purpose says so on every probe)."""
        with self._lock:
            self._notes[what] = text

    def notes(self) -> list[str]:
        with self._lock:
            return [f"{what}: {text}" for what, text in sorted(self._notes.items())]

    @property
    def ready(self) -> bool:
        with self._lock:
            return not self._blockers

    def reasons(self) -> list[str]:
        with self._lock:
            return [f"{what}: {why}" for what, why in sorted(self._blockers.items())]

    def beat(self) -> None:
        self._beat = time.monotonic()

    def stalled_for(self) -> float:
        return time.monotonic() - self._beat


def _split(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def check_port_free(what: str, listen: str) -> None:
    """Raise :class:`PortInUseError` when ``listen`` cannot be bound exclusively.

    Bound without SO_REUSEPORT, so a port held by a process that set it (every gRPC
    server does by default) still counts as taken. Port 0 is always free.
    """
    host, port = _split(listen)
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return  # the server's own bind reports an unknown host
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT port is free
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(what, listen, "another process listens there") from None
            raise


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        state = self.server.readiness
        if path == "/metrics":
            from prometheus_client import REGISTRY
            from prometheus_client.exposition import choose_encoder

            from streamwal.node.metric_scope import ScopedRegistry

            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._answer(200, encoder(ScopedRegistry(REGISTRY)), content_type)
        elif path == "/livez":
            stalled = state.stalled_for()
            if stalled > STALL_S:
                self._answer(503, f"event loop stalled for {stalled:.0f}s\n".encode())
            else:
                self._answer(200, b"ok\n")
        elif path == "/readyz":
            reasons = state.reasons()
            notes = "".join(f"{note}\n" for note in state.notes())
            if reasons:
                body = "not ready\n" + "\n".join(reasons) + "\n" + notes
                self._answer(503, body.encode())
            else:
                self._answer(200, f"ready\n{notes}".encode())
        else:
            self._answer(404, b"not found: the paths are /metrics, /livez and /readyz\n")

    def _answer(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a probe every few seconds would fill the node's log."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], readiness: Readiness) -> None:
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.readiness = readiness
        super().__init__(address, _Handler)


class HttpEndpoints:
    """Bind at :meth:`start` (a taken port raises :class:`PortInUseError`), serve on a
    daemon thread, stop at :meth:`close`."""

    def __init__(self, listen: str, readiness: Readiness) -> None:
        self._listen = listen
        self.readiness = readiness
        self._server: _Server | None = None
        self.host, self.port = _split(listen)

    def start(self) -> int:
        """Bind and serve; the bound port (the OS picks one for ``:0``)."""
        check_port_free("metrics", self._listen)
        try:
            self._server = _Server((self.host, self.port), self.readiness)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError("metrics", self._listen, str(exc)) from None
            raise
        self.port = int(self._server.server_address[1])
        thread = threading.Thread(
            target=self._server.serve_forever, name="http-endpoints", daemon=True
        )
        thread.start()
        _log.info(
            "HTTP endpoints on http://%s:%d (/metrics, /livez, /readyz)", self.host, self.port
        )
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
