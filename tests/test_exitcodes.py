"""The one rule every command's errors exit by: the code a script acts on, and the
message (never a traceback) an operator reads."""

from __future__ import annotations

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
