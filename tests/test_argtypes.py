"""Command-line numbers: a count or a duration that cannot be meant is a usage error
(exit 2) before anything runs, in every command that takes one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from streamwal.argtypes import count, count_or_zero, seconds, seconds_or_zero
from tests.node.processes import run_streamwal


@pytest.mark.parametrize("parse", [count, seconds])
@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "-inf", "ten", ""])
def test_a_count_or_duration_refuses_what_cannot_be_meant(parse: object, text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse(text)  # type: ignore[operator]


def test_plain_values_pass_and_zero_where_it_means_none() -> None:
    assert count("3") == 3 and isinstance(count("3"), int)
    assert seconds("0.5") == 0.5
    assert count_or_zero("0") == 0 and seconds_or_zero("0") == 0.0
    with pytest.raises(argparse.ArgumentTypeError, match="0 or more"):
        count_or_zero("-1")
    with pytest.raises(argparse.ArgumentTypeError, match="not a whole number"):
        count("2.5")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["trace", "opens", "--limit", "-5"], "--limit"),
        (["cluster", "status", "--moves", "-3"], "--moves"),
        (["cluster", "drain", "1", "--timeout", "-1"], "--timeout"),
        (["cluster", "channels", "remove", "c", "--timeout", "0"], "--timeout"),
        (["tso", "serve", "--lease-ttl", "0"], "--lease-ttl"),
        (["tso", "serve", "--update-interval", "nan"], "--update-interval"),
        (["tso", "now", "--timeout", "-5"], "--timeout"),
        (["bench", "node", "--seconds", "-1"], "--seconds"),  # the lab's command
    ],
)
def test_a_typo_in_a_number_is_a_usage_error(args: list[str], option: str, tmp_path: Path) -> None:
    done = run_streamwal(*args, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done
    assert f"argument {option}: need a " in done.stderr, done.stderr
    assert not any(tmp_path.iterdir())  # nothing ran: no bench-results/, no output
