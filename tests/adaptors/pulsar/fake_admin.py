"""A local HTTP server playing a broker's admin API, for the admin client's unit tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeAdmin(BaseHTTPRequestHandler):
    """Answers every method with :meth:`respond`'s code, headers and JSON body."""

    def respond(self, body: bytes) -> tuple[int, dict[str, str], object]:
        raise NotImplementedError

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        code, headers, answer = self.respond(self.rfile.read(length) if length else b"")
        payload = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(code)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        return None


@contextmanager
def serving(*handlers: type[BaseHTTPRequestHandler]) -> Iterator[list[ThreadingHTTPServer]]:
    """One running server per handler, shut down afterwards."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), handler) for handler in handlers]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield servers
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def url_of(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"
