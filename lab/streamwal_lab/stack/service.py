"""One background server of the stack: how to install it, start it, and know it answers.

A concrete service subclasses :class:`Service`. ``install`` is idempotent and cached
(it reports progress through the ``progress`` callback); ``command`` is the argv
of the server; ``probe`` returns ``True`` only when the server really answers (a
producer can be created, a put succeeds, the HTTP API replies).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from streamwal_lab.stack.paths import StackPaths

__all__ = ["Progress", "Service", "ServiceState"]

Progress = Callable[[str], None]


@dataclass
class ServiceState:
    """What ``status`` shows and what ``down`` needs: recorded in the stack's state file."""

    name: str
    pid: int
    ports: dict[str, int]
    log: str
    started_at: float
    marker: str = ""
    extra: dict[str, str] = field(default_factory=dict)


class Service(abc.ABC):
    """A server the stack can install, start, probe and stop."""

    name: str
    #: how long ``up`` waits for ``probe`` after starting, in seconds
    start_timeout: float = 120.0

    def __init__(self, paths: StackPaths) -> None:
        self.paths = paths

    @property
    @abc.abstractmethod
    def ports(self) -> dict[str, int]:
        """Named loopback ports the server listens on (checked free before start)."""

    @abc.abstractmethod
    def prerequisites(self) -> list[str]:
        """Human-readable problems (missing Java, Maven, Go...); empty when all is there."""

    @abc.abstractmethod
    def install(self, progress: Progress) -> None:
        """Fetch/build what the server needs into the cache; a no-op when cached."""

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The argv that runs the server in the foreground (the stack daemonizes it)."""

    def environment(self) -> dict[str, str]:
        """Extra environment for the server process."""
        return {}

    def prepare(self) -> None:
        """Write config files into the stack folder before start."""

    @abc.abstractmethod
    async def probe(self) -> bool:
        """``True`` when the server really answers; must not raise."""

    #: services next to each other in start order with the same group start side by
    #: side (each needs only the services before the group); ``None``: alone
    start_group: str | None = None

    #: how many times ``up`` starts the server while :meth:`start_problem` finds one
    start_attempts: int = 1

    async def start_problem(self, output: Callable[[], str]) -> str | None:
        """A fault the server shows only once it answers, found by asking it or in
        ``output()``, what this start has written to its output file; ``None`` when
        there is none.

        ``up`` stops a server with a problem and starts it again, up to
        :attr:`start_attempts` times, then fails with the problem. Must not raise.
        """
        return None

    def restart_reason(self) -> str | None:
        """Why a server that answers must still be restarted for this ``up``: it was
        started with settings the environment has changed since (blocking; must not
        raise). ``None``: keep it."""
        return None

    async def after_start(self, progress: Progress) -> None:
        """Work that needs the server answering, done once per start by ``up`` (the
        cluster's metadata, a namespace's policies); raises when it cannot be done."""

    @property
    def workdir(self) -> Path:
        return self.paths.service_dir(self.name)

    def extra_status(self) -> dict[str, str]:
        """URLs or endpoints to show in ``status`` (e.g. a UI address)."""
        return {}

    def live_status(self) -> dict[str, object]:
        """What ``status`` learns by asking the running server (it must not raise)."""
        return {}
