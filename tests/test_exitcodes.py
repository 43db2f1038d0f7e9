"""The one rule every command's errors exit by: the code a script acts on, and the
message (never a traceback) an operator reads."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from streamwal.errors import ConfigError, NoSuchChannelError, UnavailableError
from streamwal.exitcodes import FAILED, NOT_FOUND, OK, USAGE, exit_code


def _raises(exc: BaseException) -> Callable[[], int]:
    def command() -> int:
        raise exc

    return command


def test_a_command_that_ends_keeps_its_own_code() -> None:
    assert exit_code(lambda: OK, "streamwal x") == OK
    assert exit_code(lambda: 7, "streamwal x") == 7


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (NoSuchChannelError("a", "not in the set"), NOT_FOUND, "streamwal x: channel 'a' does"),
        (ConfigError("etcd.endpoints", "empty"), USAGE, "streamwal x: invalid configuration: etcd"),
        (UnavailableError("etcd get: no answer"), FAILED, "streamwal x: etcd get: no answer"),
    ],
)
def test_each_error_exits_by_the_rule_with_its_message(
    error: Exception, code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_code(_raises(error), "streamwal x", not_found=(NoSuchChannelError,)) == code
    assert capsys.readouterr().err.startswith(message)


def test_a_missing_thing_not_named_as_such_is_a_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert exit_code(_raises(NoSuchChannelError("a", "not in the set")), "streamwal x") == FAILED
    assert "channel 'a' does not exist" in capsys.readouterr().err


def test_a_bug_is_not_hidden_behind_an_exit_code() -> None:
    with pytest.raises(KeyError):
        exit_code(_raises(KeyError("bug")), "streamwal x")


def _process(*args: str) -> subprocess.CompletedProcess[str]:
    """``streamwal *args`` through the process entry, with an exit handler of its own."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('exit handler ran', flush=True))\n"
        f"sys.argv = ['streamwal', *{list(args)!r}]\n"
        "from streamwal.cli import run\n"
        "run()\n"
        "print('not reached')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("args", "code", "shown"),
    [(("--version",), OK, "streamwal "), (("no-such-command",), USAGE, "invalid choice")],
)
def test_the_process_entry_keeps_the_code_and_runs_the_exit_handlers(
    args: tuple[str, ...], code: int, shown: str
) -> None:
    """The entry skips the interpreter's finalization (see ``streamwal.cli.run``), not
    what a normal exit writes: the command's output and code, the exit handlers (the
    traces' flush is one)."""
    done = _process(*args)
    assert done.returncode == code, done
    assert shown in done.stdout + done.stderr, done
    assert done.stdout.count("exit handler ran") == 1, done
    assert "not reached" not in done.stdout, done
