"""The conformance suite's own check of an expected error, which stands in for
``pytest.raises`` so the product imports no test runner."""

from __future__ import annotations

import pytest

from streamwal.adaptors.testing import raises
from streamwal.errors import ChannelFencedError, ClosedError, StreamwalError


def test_the_expected_error_or_a_subclass_passes() -> None:
    with raises(ChannelFencedError):
        raise ChannelFencedError("fenced")
    with raises(StreamwalError):
        raise ClosedError("closed")


def test_no_error_fails_the_check() -> None:
    expected = pytest.raises(AssertionError, match="did not raise ChannelFencedError")
    with expected, raises(ChannelFencedError):
        pass


def test_another_error_goes_through_unchanged() -> None:
    with pytest.raises(ClosedError), raises(ChannelFencedError):
        raise ClosedError("closed")
