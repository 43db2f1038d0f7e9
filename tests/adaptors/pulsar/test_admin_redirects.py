"""The admin client follows a broker's redirect for every method, as brokers answer a
topic's admin call with ``307`` to the topic's owner (unit: two local HTTP servers, one
redirecting to the other, and the real broker's redirect-free path)."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import UnavailableError
from tests.adaptors.pulsar.fake_admin import FakeAdmin, serving, url_of


class _Owner(FakeAdmin):
    """The topic's owner: records what it was asked and answers with it."""

    seen: list[tuple[str, str, bytes, str | None]] = []

    def respond(self, body: bytes) -> tuple[int, dict[str, str], object]:
        _Owner.seen.append((self.command, self.path, body, self.headers.get("Authorization")))
        return 200, {}, {"method": self.command}


def _redirecting_to(target: str, code: int = 307) -> type[FakeAdmin]:
    class _Redirect(FakeAdmin):
        def respond(self, body: bytes) -> tuple[int, dict[str, str], object]:
            return code, {"Location": f"{target}{self.path}"}, None

    return _Redirect


@pytest.fixture
def servers() -> Iterator[tuple[str, str, ThreadingHTTPServer]]:
    _Owner.seen = []
    with serving(_Owner, _redirecting_to("http://127.0.0.1:1")) as (owner, loop):
        loop.RequestHandlerClass = _redirecting_to(url_of(loop))
        with serving(_redirecting_to(url_of(owner))) as (other,):
            yield url_of(owner), url_of(other), loop


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
