"""The few questions ``streamwal trace`` asks Jaeger's HTTP query API, with typed answers.

Unlike the polling helpers of :mod:`streamwal.node.trace.query` (tests and the lab wait
there for spans still on their way), each call here asks once: a person at a shell wants
"not there" or "Jaeger is down" at once, as :class:`TraceNotFoundError` or
:class:`~streamwal.errors.UnavailableError`, each saying what to do.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote, urlencode

from streamwal import environment
from streamwal.defaults import JAEGER_URL
from streamwal.errors import InvalidInputError, StreamwalError, UnavailableError
from streamwal.node.trace.query import HTTPStatusError, get_data

__all__ = [
    "DEFAULT_JAEGER_URL",
    "ENV_JAEGER_URL",
    "TraceNotFoundError",
    "default_jaeger_url",
    "fetch_trace",
    "list_services",
    "search_traces",
]

#: the query API to read from; :data:`DEFAULT_JAEGER_URL` when unset
ENV_JAEGER_URL = environment.JAEGER_URL
#: Jaeger's own default query port on loopback, where the lab's local stack serves it
#: too: the product names the URL instead of asking the lab, which a production
#: install does not have
DEFAULT_JAEGER_URL = JAEGER_URL

#: Jaeger's own traces (when it traces itself) are never a WAL's
_OWN_SERVICES = frozenset({"jaeger", "jaeger-all-in-one"})
_PARALLEL_SEARCHES = 4


class TraceNotFoundError(StreamwalError, LookupError):
    """Jaeger does not hold this trace (wrong id, or gone: its storage is in memory)."""

    def __init__(self, trace_id: str, jaeger_url: str) -> None:
        self.trace_id = trace_id
        super().__init__(
            f"Jaeger at {jaeger_url} holds no trace {trace_id} (a restarted Jaeger forgets "
            "every trace; `streamwal trace opens` lists the ones it has)"
        )


def default_jaeger_url(explicit: str | None = None) -> str:
    """``explicit``, else ``$STREAMWAL_JAEGER_URL``, else :data:`DEFAULT_JAEGER_URL`."""
    if explicit:
        return explicit.rstrip("/")
    return environment.jaeger_url()


async def _ask(jaeger_url: str, path: str) -> list[Any]:
    try:
        return await asyncio.to_thread(get_data, f"{jaeger_url}{path}")
    except HTTPStatusError:
        raise
    except (OSError, ValueError) as exc:
        raise UnavailableError(
            f"Jaeger's query API at {jaeger_url} does not answer ({exc}); start the local "
            f"stack with `streamwal stack up` (streamwal-lab), or name another Jaeger with "
            f"--jaeger or ${ENV_JAEGER_URL}"
        ) from exc


async def fetch_trace(jaeger_url: str, trace_id: str) -> dict[str, Any]:
    """The trace ``trace_id`` (32 hex digits, as the node's answers carry it)."""
    trace_id = trace_id.strip().lower()
    if not trace_id or any(c not in "0123456789abcdef" for c in trace_id) or len(trace_id) > 32:
        raise InvalidInputError(f"not a trace id (up to 32 hex digits): {trace_id!r}")
    try:
        data = await _ask(jaeger_url, f"/api/traces/{trace_id}")
    except HTTPStatusError as exc:
        if exc.status == 404:
            raise TraceNotFoundError(trace_id, jaeger_url) from exc
        raise UnavailableError(f"Jaeger at {jaeger_url}: {exc}") from exc
    if not data or not isinstance(data[0], dict) or not data[0].get("spans"):
        raise TraceNotFoundError(trace_id, jaeger_url)
    return data[0]


async def list_services(jaeger_url: str) -> list[str]:
    """The services Jaeger holds spans of, Jaeger's own left out."""
    try:
        names = await _ask(jaeger_url, "/api/services")
    except HTTPStatusError as exc:
        raise UnavailableError(f"Jaeger at {jaeger_url}: {exc}") from exc
    return sorted(str(n) for n in names if str(n) not in _OWN_SERVICES)


async def search_traces(
    jaeger_url: str,
    services: list[str],
    operation: str,
    *,
    start_us: int,
    end_us: int,
    tags: dict[str, str] | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """Traces holding a span ``operation`` of any of ``services`` started in the window.

    Jaeger's search takes one service at a time; the services are asked a few at a
    time, and a trace found under several of them is returned once.
    """
    gate = asyncio.Semaphore(_PARALLEL_SEARCHES)

    async def one(service: str) -> list[Any]:
        query = {
            "service": service,
            "operation": operation,
            "start": str(start_us),
            "end": str(end_us),
            "limit": str(limit),
        }
        if tags:
            query["tags"] = json.dumps(tags)
        async with gate:
            try:
                return await _ask(jaeger_url, f"/api/traces?{urlencode(query, quote_via=quote)}")
            except HTTPStatusError as exc:
                raise UnavailableError(f"Jaeger at {jaeger_url}: {exc}") from exc

    found: dict[str, dict[str, Any]] = {}
    for traces in await asyncio.gather(*(one(s) for s in services)):
        for trace in traces:
            if isinstance(trace, dict):
                found.setdefault(str(trace.get("traceID", "")), trace)
    return list(found.values())
