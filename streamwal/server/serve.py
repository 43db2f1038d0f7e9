"""``streamwal serve``: run one node until SIGTERM or SIGINT, then stop gracefully.

A start that cannot work stops at once with one line on stderr and exit code 1: a
taken gRPC or metrics port, a node id a live node holds, an etcd that does not
answer. A configuration that does not load (an unknown or misspelled key, a bad
value, a file that cannot be read) exits 2 before anything starts, as every command
does (:mod:`streamwal.exitcodes`). The HTTP port (``/metrics``, ``/livez``,
``/readyz``) is bound first, so a probe reads "not ready" and why while the node
starts. The ``ready on`` line is printed when the node can serve (it reached its
broker), not when it listens.

Its log lines name the node (several may share a host, a terminal, a collector), as
text or JSON (``node.log_format``); its Pulsar client's log is a file of its own,
named in the ``listening on`` line (:mod:`streamwal.node.logs`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import os
import signal
import sys
import traceback
from typing import Any

from streamwal.errors import StreamwalError
from streamwal.exitcodes import USAGE
from streamwal.node.config import ConfigError
from streamwal.node.config_cli import add_source_arguments, config_from_args
from streamwal.node.endpoints import HttpEndpoints, Readiness
from streamwal.node.logs import ClientLogRelay, client_log_path, setup_node_logging
from streamwal.node.telemetry import setup_telemetry
from streamwal.server.runtime import Node
from streamwal.tso import Clock

__all__ = ["add_arguments", "register", "run"]

_log = logging.getLogger(__name__)

# A node allocates a few objects per message, and its write-ahead buffers keep up to
# 64 MiB of messages per channel alive: with CPython's default thresholds (700, 10, 10)
# the collector runs every few hundred appends and stops the loop, which is most of a
# streamed append's p999 (docs/performance.md, "What the design choices save").
# Messages hold no reference cycles, so rarer young collections lose nothing; the
# objects of start-up are frozen out of them.
_GC_THRESHOLDS = (50_000, 20, 100)


def register(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run a streaming node")
    add_arguments(serve)
    serve.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``streamwal serve``, for an entry that starts a node its own way."""
    add_source_arguments(parser)


def run(args: argparse.Namespace, *, clock: Clock | None = None) -> int:
    """Run one node with the options of :func:`add_arguments` until a signal stops it;
    the exit code. Leaves the process when done (``os._exit``). ``clock``: the
    in-process oracle's (``None``: the system's), for an entry that injects another."""
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"invalid configuration: {exc}", file=sys.stderr)
        return USAGE
    formatter = setup_node_logging(
        config.node.id, config.node.log_format, config.telemetry.log_level
    )
    say = _Say(config.node.log_format)
    client_log = client_log_path(config)
    relay: ClientLogRelay | None = None
    if client_log is not None:
        relay = ClientLogRelay(client_log, config.node.id, formatter)
        try:
            target = relay.start()
        except OSError as exc:
            say.error(f"cannot start the node: Pulsar client log {client_log}: {exc}")
            return 1
        pulsar = dataclasses.replace(config.pulsar, client_log_file=target)
        config = dataclasses.replace(config, pulsar=pulsar)
    readiness = Readiness()
    endpoints: HttpEndpoints | None = None
    if config.node.metrics_listen:
        endpoints = HttpEndpoints(config.node.metrics_listen, readiness)
        try:
            endpoints.start()
        except (StreamwalError, OSError) as exc:
            say.error(f"cannot start the node: {exc}")
            if relay is not None:
                relay.close()
            return 1
    telemetry = setup_telemetry(config, serve_metrics=False)
    code = 1
    shown = "stderr (Python logging)" if client_log is None else str(client_log)
    try:
        code = asyncio.run(_serve(config, endpoints, readiness, say, shown, clock))
    except BaseException:  # reported here: os._exit below would swallow it
        say.exception("the node stopped on an unexpected error")
    finally:
        if endpoints is not None:
            endpoints.close()
        telemetry.shutdown()
        if relay is not None:
            relay.close()  # the clients' last lines, before os._exit
        # Everything is closed and flushed by now. The Pulsar C++ client can abort
        # (SIGABRT) while the interpreter tears its threads down, turning a clean
        # stop into a crash code; leave without running those destructors.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class _Say:
    """A refused start's one line on stderr: plain text, as operators and scripts
    read it, or a log record in JSON, where every line on stderr must parse."""

    def __init__(self, log_format: str) -> None:
        self.json = log_format == "json"

    def error(self, message: str) -> None:
        if self.json:
            _log.error("%s", message)
        else:
            print(message, file=sys.stderr)

    def exception(self, message: str) -> None:
        if self.json:
            _log.exception("%s", message)
        else:
            traceback.print_exc()


async def _serve(
    config: Any,
    endpoints: HttpEndpoints | None,
    readiness: Readiness,
    say: _Say,
    client_log: str,
    clock: Clock | None,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node = Node(config, readiness=readiness, clock=clock)
    try:
        await node.start()
    except (StreamwalError, OSError) as exc:
        say.error(f"cannot start the node: {exc}")
        return 1
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
    # the port, where the configuration let the OS pick it (``:0``), is only known here
    metrics = ""
    if endpoints is not None:
        metrics = f" (metrics on http://{endpoints.host}:{endpoints.port}/metrics)"
    print(
        f"streamwal node {config.node.id} listening on {node.address}; "
        f"it serves once it reaches the broker (Pulsar client log: {client_log})",
        flush=True,
    )
    ready = asyncio.ensure_future(node.wait_ready())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait((ready, stopped), return_when=asyncio.FIRST_COMPLETED)
    if ready.done():
        print(f"streamwal node {config.node.id} ready on {node.address}{metrics}", flush=True)
    else:
        ready.cancel()
    await stopped
    _log.info("signal received: stopping gracefully")
    await node.close()
    return 0
