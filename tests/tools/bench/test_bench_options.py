"""``streamwal bench`` options: a count or a duration that cannot be meant is refused
before anything runs, as a typo, not measured as a run with nothing in it."""

from __future__ import annotations

import argparse

import pytest

from streamwal_lab.bench.suites import SUITES, Suite, default_arguments

#: options where 0 means "none of it": opens across an outage, the failover grace, the
#: failover's kills (its rolling restart alone)
_ZERO_ALLOWED = {"--outage-repeats", "--grace", "--kills"}


def _numeric_options(suite: Suite) -> list[str]:
    parser = argparse.ArgumentParser(exit_on_error=False)
    suite.add_arguments(parser)
    defaults = vars(default_arguments(suite))
    return [
        a.option_strings[0]
        for a in parser._actions
        if a.option_strings
        and isinstance(defaults.get(a.dest), (int, float))
        and not isinstance(defaults.get(a.dest), bool)
    ]


def _parser(suite: Suite) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    suite.add_arguments(parser)
    return parser


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_count_and_duration_refuses_what_cannot_be_meant(name: str) -> None:
    suite = SUITES[name]
    options = _numeric_options(suite)
    assert options, f"{name}: no numeric option found"
    parser = _parser(suite)
    for option in options:
        for bad in ("-1", "nan", "inf", "x"):
            with pytest.raises(argparse.ArgumentError):
                parser.parse_args([option, bad])
        if option in _ZERO_ALLOWED:
            assert vars(parser.parse_args([option, "0"]))[option[2:].replace("-", "_")] == 0
        else:
            with pytest.raises(argparse.ArgumentError, match="above 0"):
                parser.parse_args([option, "0"])
        parser.parse_args([option, "1"])  # a plain one passes
