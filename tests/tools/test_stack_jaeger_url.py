"""``streamwal trace`` finds the local stack's Jaeger without asking the lab.

The product cannot import the lab, so it names the URL itself
(:data:`~streamwal.node.trace.jaeger.DEFAULT_JAEGER_URL`); this keeps the two equal,
so ``streamwal trace`` with no ``--jaeger`` still reads the stack's Jaeger.
"""

from __future__ import annotations

import pytest

from streamwal.node.trace.jaeger import DEFAULT_JAEGER_URL, ENV_JAEGER_URL, default_jaeger_url
from streamwal_lab.stack.jaeger import JaegerService
from streamwal_lab.stack.paths import StackPaths


def test_the_default_is_the_stack_jaeger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_JAEGER_URL, raising=False)
    assert JaegerService(StackPaths.default()).url == DEFAULT_JAEGER_URL
    assert default_jaeger_url() == DEFAULT_JAEGER_URL


def test_the_environment_and_the_flag_come_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_JAEGER_URL, "http://jaeger.example:16686/")
    assert default_jaeger_url() == "http://jaeger.example:16686"
    assert default_jaeger_url("http://other:1/") == "http://other:1"
