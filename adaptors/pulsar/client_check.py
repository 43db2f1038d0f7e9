"""The pulsar-client versions this backend was tested with, checked when it starts.

The sending path uses two private parts of pulsar-client, for the order of the log
and the cost of an append: ``pulsar.asyncio.Producer._producer`` (the C extension's
producer, whose ``send_async`` enqueues synchronously) and ``_pulsar.MessageBuilder``.
There is no public path that keeps the log's order, so on a version outside
:data:`TESTED` the opener stops with :class:`~streamwal.errors.MisconfiguredError`
instead of writing a log it cannot vouch for.
"""

from __future__ import annotations

import inspect
from importlib.metadata import PackageNotFoundError, version

import _pulsar
import pulsar.asyncio as pulsar_asyncio

from streamwal.errors import MisconfiguredError

__all__ = ["TESTED", "check_client"]

#: (major, minor) series of pulsar-client the suite ran against; pyproject's range
TESTED = ((3, 13),)
_checked = False


def _series(text: str) -> tuple[int, int]:
    major, minor, *_ = (int(p) for p in [*text.split(".")[:2], "0"])
    return major, minor


def check_client(installed: str | None = None) -> None:
    """Raise :class:`MisconfiguredError` unless pulsar-client is a tested version that
    still has the private API this backend uses. Cheap after the first call."""
    global _checked
    if _checked and installed is None:
        return
    if installed is None:
        try:
            installed = version("pulsar-client")
        except PackageNotFoundError:
            installed = "unknown"
    tested = ", ".join(f"{a}.{b}.x" for a, b in TESTED)
    if installed == "unknown" or _series(installed) not in TESTED:
        raise MisconfiguredError(
            f"pulsar-client {installed} is not a version streamwal was tested with "
            f"({tested}): its Pulsar backend relies on the client's private sending API; "
            f"install a tested one, e.g. pip install 'pulsar-client>={TESTED[-1][0]}."
            f"{TESTED[-1][1]},<{TESTED[-1][0]}.{TESTED[-1][1] + 1}'"
        )
    missing = []
    if not hasattr(_pulsar, "MessageBuilder"):
        missing.append("_pulsar.MessageBuilder")
    if "producer" not in inspect.signature(pulsar_asyncio.Producer.__init__).parameters:
        missing.append("pulsar.asyncio.Producer._producer")
    if missing:
        raise MisconfiguredError(
            f"pulsar-client {installed} lacks {', '.join(missing)}, which streamwal's "
            f"Pulsar backend needs (tested: {tested})"
        )
    _checked = True
