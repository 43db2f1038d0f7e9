"""The node's native front (``node.front: native``): the ``streamwal-front`` binary.

grpc.aio costs the node's process about 300 us of CPU per unary call, more than the
WAL spends on the append itself, and the node cannot batch calls it has already paid
for one by one. The front (Go, ``front/``) listens where the clients connect and hands
the unary ``Produce`` calls waiting at the same moment for the same channel and
credentials to the node as one ``ProduceBatchStream`` frame of independent appends;
every other call, and a ``Produce`` it does not coalesce (in a
transaction, traced by its caller, large), goes to the node as it came. The node's
own server then listens on a Unix socket in a private folder: the front is the only
way in, so the node's auth, tracing and write outcomes stay the node's.

The front is the node's child: it ends with the node (``PR_SET_PDEATHSIG``), and a
front that exits on its own turns the node not ready (its cluster moves its channels
away) instead of leaving a node nobody can reach serving as if it were whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from streamwal.errors import MisconfiguredError, UnavailableError

__all__ = ["FRONT_BINARY", "NativeFront", "front_binary"]

_log = logging.getLogger(__name__)

#: the binary's name; ``./dev`` builds it next to the virtualenv's Python
FRONT_BINARY = "streamwal-front"
#: how long the front may take to say where it listens
_START_TIMEOUT_S = 10.0
#: how long SIGTERM waits before SIGKILL
_STOP_TIMEOUT_S = 5.0


def front_binary(configured: str) -> str:
    """The front's executable: ``configured``, else next to this Python, else on PATH;
    :class:`MisconfiguredError` naming how to build it when there is none."""
    if configured:
        if not Path(configured).is_file():
            raise MisconfiguredError(f"node.front_binary {configured!r} does not exist")
        return configured
    beside = Path(sys.executable).parent / FRONT_BINARY
    if beside.is_file():
        return str(beside)
    found = shutil.which(FRONT_BINARY)
    if found is None:
        raise MisconfiguredError(
            f"node.front is native but {FRONT_BINARY} is not installed: build it with Go "
            f"(`cd front && go build -o <your venv>/bin/{FRONT_BINARY} .`; `./dev` does) "
            "or set node.front_binary, or node.front: python"
        )
    return found


class NativeFront:
    """One front process: :meth:`start` gives the port it listens on, :meth:`close`
    stops it; ``on_exit`` is told (once) when it exits on its own."""

    def __init__(
        self, binary: str, listen: str, max_message_bytes: int, *, coalesce: bool = True
    ) -> None:
        self._listen = listen
        self._folder = tempfile.TemporaryDirectory(prefix="streamwal-node-")
        #: where the node's own gRPC server listens: only the front dials it
        self.upstream = f"unix:{self._folder.name}/node.sock"
        self._argv = [
            binary,
            f"--listen={listen}",
            f"--upstream={self.upstream}",
            f"--max-message-bytes={max_message_bytes}",
            f"--coalesce={str(coalesce).lower()}",
        ]
        self._proc: asyncio.subprocess.Process | None = None
        self._watch: asyncio.Task[None] | None = None
        self._closing = False

    async def start(self, on_exit: Callable[[int], None]) -> int:
        """Start the front; the port it bound (``listen`` may say ``:0``)."""
        self._proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self._proc.stdout is not None
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), _START_TIMEOUT_S)
        except TimeoutError:
            await self.close()
            raise UnavailableError(
                f"{FRONT_BINARY} did not start within {_START_TIMEOUT_S} s"
            ) from None
        text = line.decode(errors="replace").strip()
        if not text.startswith("listening on "):
            code = await self._proc.wait()
            self._folder.cleanup()
            raise UnavailableError(
                f"{FRONT_BINARY} could not listen on {self._listen} (exit code {code}; "
                "its reason is on stderr)"
            )
        self._watch = asyncio.create_task(self._watched(on_exit), name="node-front-watch")
        return int(text.rpartition(":")[2])

    async def _watched(self, on_exit: Callable[[int], None]) -> None:
        assert self._proc is not None
        code = await self._proc.wait()
        if not self._closing:
            _log.error("%s exited on its own (exit code %s)", FRONT_BINARY, code)
            on_exit(code)

    async def close(self) -> None:
        """Stop the front (SIGTERM: it lets calls in flight end), then SIGKILL after
        :data:`_STOP_TIMEOUT_S`; removes the socket's folder. Idempotent."""
        self._closing = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), _STOP_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._watch is not None:
            await self._watch
        self._folder.cleanup()
