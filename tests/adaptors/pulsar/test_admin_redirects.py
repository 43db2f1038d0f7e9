"""The admin client follows a broker's redirect for every method, as brokers answer a
topic's admin call with ``307`` to the topic's owner (unit: two local HTTP servers, one
redirecting to the other, and the real broker's redirect-free path)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import UnavailableError


class _Owner(BaseHTTPRequestHandler):
    """The topic's owner: records what it was asked and answers with it."""

    seen: list[tuple[str, str, bytes, str | None]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        _Owner.seen.append((self.command, self.path, body, self.headers.get("Authorization")))
        payload = json.dumps({"method": self.command}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        return None


def _redirecting_to(target: str, code: int = 307) -> type[BaseHTTPRequestHandler]:
    class _Redirect(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(code)
            self.send_header("Location", f"{target}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_PUT = do_POST = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            return None

    return _Redirect


@pytest.fixture
def servers() -> Iterator[tuple[str, str, ThreadingHTTPServer]]:
    _Owner.seen = []
    owner = ThreadingHTTPServer(("127.0.0.1", 0), _Owner)
    owner_url = f"http://127.0.0.1:{owner.server_address[1]}"
    other = ThreadingHTTPServer(("127.0.0.1", 0), _redirecting_to(owner_url))
    loop = ThreadingHTTPServer(("127.0.0.1", 0), _redirecting_to("http://127.0.0.1:1"))
    loop.RequestHandlerClass = _redirecting_to(f"http://127.0.0.1:{loop.server_address[1]}")
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (owner, other, loop)]
    for thread in threads:
        thread.start()
    try:
        yield owner_url, f"http://127.0.0.1:{other.server_address[1]}", loop
    finally:
        for server in (owner, other, loop):
            server.shutdown()
            server.server_close()


async def test_every_method_follows_the_owner_s_redirect(
    servers: tuple[str, str, ThreadingHTTPServer],
) -> None:
    _, not_owner, _ = servers
    admin = PulsarAdmin(not_owner, token="secret")
    path = "persistent/public/default/t/subscription/s"
    assert await admin.get(path) == {"method": "GET"}
    assert await admin.put(path, {"a": 1}) == {"method": "PUT"}
    assert await admin.post(path, {"b": 2}) == {"method": "POST"}
    assert await admin.delete(path) == {"method": "DELETE"}
    assert [(m, body) for m, _, body, _ in _Owner.seen] == [
        ("GET", b""),
        ("PUT", b'{"a": 1}'),
        ("POST", b'{"b": 2}'),
        ("DELETE", b""),
    ]
    assert all(p == f"/admin/v2/{path}" for _, p, _, _ in _Owner.seen)
    assert all(auth == "Bearer secret" for *_, auth in _Owner.seen)


async def test_a_redirect_loop_ends_with_a_typed_error(
    servers: tuple[str, str, ThreadingHTTPServer],
) -> None:
    *_, loop = servers
    admin = PulsarAdmin(f"http://127.0.0.1:{loop.server_address[1]}")
    with pytest.raises(UnavailableError, match="redirects"):
        await admin.put("persistent/public/default/t", {})
