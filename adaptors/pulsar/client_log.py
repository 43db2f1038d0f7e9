"""Where the Pulsar C++ client's log goes when the library, not a node, creates it.

A library user who configured no logging sees Python's last-resort handler print
every WARNING to stderr, and the client warns about things the WAL does on purpose:
taking a channel over fences the old owner's producer (``ProducerFenced``), closing
that producer afterwards fails with ``AlreadyClosed``, and a takeover racing a
producer still registered meets ``ProducerBusy``. The WAL turns each of those into
its own typed outcome (:class:`~streamwal.errors.ChannelFencedError`), so the
client's lines say nothing the caller does not already know: they are logged at
DEBUG here, while any other warning or error of the client still reaches WARNING.

A node logs the client natively into a file instead (``PulsarConfig.client_log_file``):
through Python, the client calls into the interpreter for every DEBUG line it might
write, whatever the logger's level (docs/performance.md, "What the design choices save").
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pulsar

__all__ = [
    "CLIENT_LOGGER",
    "ExpectedClientLines",
    "client_log_target",
    "expected_line",
    "python_client_logger",
]

#: the Python logger the client writes to when it has no file
CLIENT_LOGGER = "streamwal.pulsar.client"

#: what the client says when the WAL fences, or is fenced, as designed
_EXPECTED = re.compile(r"ProducerFenced|ProducerBusy|AlreadyClosed")


def expected_line(message: str) -> bool:
    """Whether a line of the client reports a fence the WAL made or met on purpose."""
    return _EXPECTED.search(message) is not None


class ExpectedClientLines(logging.Filter):
    """Downgrades the client's expected fence lines to DEBUG (see the module's text).

    It rewrites the record rather than dropping it, so an application that turns the
    client logger up to DEBUG still sees every fence the client reported.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG or not expected_line(record.getMessage()):
            return True
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_FILTER = ExpectedClientLines()


def python_client_logger() -> logging.Logger:
    """The client's Python logger: WARNING unless the application set a level (the
    client logs every reconnect at INFO), expected fence lines at DEBUG."""
    logger = logging.getLogger(CLIENT_LOGGER)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


def client_log_target(log_file: str | None) -> logging.Logger | pulsar.FileLogger:
    """What ``pulsar.Client(logger=...)`` gets: native into ``log_file`` (WARN and
    above, no Python call per line), else :func:`python_client_logger`."""
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        return pulsar.FileLogger(pulsar.LoggerLevel.Warn, log_file)
    return python_client_logger()
