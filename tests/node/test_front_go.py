"""The native front's own Go tests (``front/*_test.go``: its wire parsing and frame
building, which trace contexts it forwards alone), run with the stack's Go environment
as ``./dev`` builds the front with it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from streamwal_lab.stack.gobuild import go_environment
from streamwal_lab.stack.paths import StackPaths

_FRONT = Path(__file__).resolve().parents[2] / "front"


def test_the_fronts_go_tests_pass() -> None:
    go = shutil.which("go")
    assert go is not None, "Go is needed for the native front (front/): install Go"
    done = subprocess.run(
        [go, "test", "-count=1", "./..."],
        cwd=_FRONT,
        env=go_environment(StackPaths.default()),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ok" in done.stdout and "streamwal/front" in done.stdout, done.stdout
