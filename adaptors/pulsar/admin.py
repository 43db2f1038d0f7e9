"""A small asyncio wrapper over the broker's admin REST API.

The Python client speaks only the binary protocol, and what the WAL must know about a
topic's policies (TTL, backlog quota, retention, deduplication) and its subscriptions
is only on the admin API. The calls are few and off the hot path (once per open), so
they run on worker threads with the standard library rather than a new dependency.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from streamwal import environment
from streamwal.backoff import Backoff
from streamwal.defaults import PULSAR_BROKER_PORT, PULSAR_WEB_PORT
from streamwal.errors import MisconfiguredError, UnavailableError
from streamwal.retry import Retry

__all__ = ["AdminRefusedError", "PulsarAdmin", "admin_url_for", "require_topic"]


class AdminRefusedError(UnavailableError):
    """412 Precondition Failed: the broker refused the call in the topic's present state
    (a delete while a producer or consumer is attached); it may pass later."""


#: Pulsar's standard binary ports and the admin port beside each
_ADMIN_PORTS = {
    PULSAR_BROKER_PORT: ("http", PULSAR_WEB_PORT),
    6651: ("https", 8443),
}


def admin_url_for(service_url: str) -> str | None:
    """The admin URL of the broker at ``service_url``: ``$STREAMWAL_PULSAR_ADMIN_URL``
    when ``service_url`` is the broker the environment names, else the port beside a
    standard one (6650→8080, 6651→8443); else ``None``."""
    named = environment.pulsar_admin_url(service_url)
    if named is not None:
        return named
    _, _, rest = service_url.partition("://")
    hosts = rest.rstrip("/").split(",")
    host, _, port = hosts[0].rpartition(":")
    if not host or not port.isdigit() or int(port) not in _ADMIN_PORTS:
        return None
    web_scheme, web_port = _ADMIN_PORTS[int(port)]
    return f"{web_scheme}://{host}:{web_port}"


class PulsarAdmin:
    """GET/PUT/DELETE on one broker's admin API; errors are streamwal's types.

    A 404 reads as ``None`` (a topic or policy that is not there); 401/403 is a
    :class:`MisconfiguredError` (the token lacks admin rights); anything else that
    fails is :class:`UnavailableError`.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        trust_certs_file: str | None = None,
        allow_insecure: bool = False,
        timeout: float = 10.0,
    ) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout
        self._context: ssl.SSLContext | None = None
        if self.url.startswith("https://"):
            self._context = ssl.create_default_context(cafile=trust_certs_file)
            if allow_insecure:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE
        self._opener = urllib.request.build_opener(
            _NoRedirect(), urllib.request.HTTPSHandler(context=self._context)
        )

    @staticmethod
    def topic_path(topic: str) -> str:
        """``persistent://t/ns/name`` → ``persistent/t/ns/name`` (quoted)."""
        domain, _, rest = topic.partition("://")
        return f"{domain}/{urllib.parse.quote(rest)}"

    async def get(self, path: str) -> Any:
        return await asyncio.to_thread(self._call, "GET", path, None)

    async def put(self, path: str, body: Any = None) -> Any:
        return await asyncio.to_thread(self._call, "PUT", path, body)

    async def post(self, path: str, body: Any = None) -> Any:
        return await asyncio.to_thread(self._call, "POST", path, body)

    async def delete(self, path: str) -> Any:
        return await asyncio.to_thread(self._call, "DELETE", path, None)

    async def lookup(self, topic: str) -> dict[str, str] | None:
        """Which broker serves ``topic`` now (``brokerUrl``, ``httpUrl``), asking the
        cluster to place it if nobody does; ``None`` if the topic cannot be served."""
        path = f"/lookup/v2/topic/{self.topic_path(topic)}"
        answer = await asyncio.to_thread(self._call, "GET", path, None, "")
        return answer if isinstance(answer, dict) else None

    async def bundle(self, topic: str) -> str | None:
        """The bundle of its namespace ``topic`` falls in (``0x00000000_0x10000000``):
        what a broker owns, and what an operator unloads to move the topic."""
        path = f"/lookup/v2/topic/{self.topic_path(topic)}/bundle"
        answer = await asyncio.to_thread(self._call, "GET", path, None, "")
        return answer.strip().strip('"') if isinstance(answer, str) else None

    def _call(self, method: str, path: str, body: Any, root: str = "/admin/v2") -> Any:
        url = f"{self.url}{root}/{path.lstrip('/')}"
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            raw = self._send(method, url, data, headers)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            detail = _reason(exc)
            if exc.code in (401, 403):
                raise MisconfiguredError(
                    f"the broker's admin API refused {method} {path}: {exc.code} {detail} "
                    "(pulsar.auth_token needs admin rights on the namespace)"
                ) from None
            if exc.code == 409:
                raise FileExistsError(f"{method} {path}: {detail}") from None
            if exc.code == 412:
                raise AdminRefusedError(f"admin {method} {path}: {exc.code} {detail}") from None
            raise UnavailableError(f"admin {method} {path}: {exc.code} {detail}") from None
        except (OSError, TimeoutError) as exc:
            raise UnavailableError(
                f"the broker's admin API at {self.url} did not answer: {exc}"
            ) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def _send(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> bytes:
        """One request, following redirects with the same method and body. A broker
        answers a topic's admin call with ``307`` to the topic's owner; urllib follows
        that only for GET, so behind a load-balanced admin address every write to a
        topic another broker owns would fail."""
        first, redirects = url, 0
        moving = Retry(
            _MOVING_PAUSES,
            deadline=time.monotonic() + min(self._timeout, _MOVING_WAIT_S),
            retry_if=lambda exc: isinstance(exc, urllib.error.HTTPError) and _moving(exc),
        )
        while True:
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with self._opener.open(request, timeout=self._timeout) as r:
                    return bytes(r.read())
            except urllib.error.HTTPError as exc:
                location = exc.headers.get("Location") if exc.code in _REDIRECTS else None
                if location:
                    redirects += 1
                    if redirects > _MAX_REDIRECTS:
                        raise UnavailableError(
                            f"admin {method} {url}: more than {_MAX_REDIRECTS} redirects"
                        ) from None
                    url = urllib.parse.urljoin(url, location)
                    continue
                pause = moving.next(exc)
                if pause is None:
                    raise
            # the topic's bundle is between two brokers: ask again once it has landed,
            # from the start (where the bundle lands decides where a redirect leads);
            # a blocking wait, as the request itself is
            time.sleep(pause)
            url, redirects = first, 0


_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 5
#: how long a call waits for a topic whose bundle is moving between brokers
_MOVING_WAIT_S = 10.0
_MOVING_PAUSES = Backoff(initial=0.1, maximum=1.0)


def _moving(exc: urllib.error.HTTPError) -> bool:
    """The broker's answer while a topic's bundle is unloaded and not yet owned again:
    412 "Can't find owner for topic", 500 "Failed to acquire ownership for namespace
    bundle" or "Resource at /namespace/... is already locked" (two brokers claiming
    it), or 503 (the bundle is being unloaded)."""
    if exc.code == 503:
        return True
    reason = _reason(exc).lower()
    if exc.code == 500 and "/namespace/" in reason and "already locked" in reason:
        return True
    return exc.code in (412, 500) and "owner" in reason


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are followed by :meth:`PulsarAdmin._send`, for every method."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _reason(exc: urllib.error.HTTPError) -> str:
    """The broker's reason for an error answer (its body can be read once: kept)."""
    known = getattr(exc, "_streamwal_reason", None)
    if isinstance(known, str):
        return known
    try:
        body = exc.read().decode(errors="replace")
        reason = str(json.loads(body).get("reason", body))[:300]
    except (ValueError, AttributeError, OSError):
        reason = str(exc.reason)[:300]
    exc._streamwal_reason = reason  # type: ignore[attr-defined]
    return reason


async def require_topic(admin: PulsarAdmin, topic: str, channel: str) -> None:
    """:class:`NoSuchChannelError` unless ``topic`` exists. Asked of the admin API,
    which answers 404 for a missing topic: a reader or producer would create it (the
    broker auto-creates topics), turning a typo into a new, empty channel."""
    from streamwal.errors import NoSuchChannelError

    if await admin.get(f"{PulsarAdmin.topic_path(topic)}/subscriptions") is None:
        raise NoSuchChannelError(channel, f"no topic {topic} on the broker")
