"""``python -m streamwal_lab.stack.front_build SOURCE OUT``: the node's native front (its
Go module ``SOURCE``, ``front/``) built into ``OUT`` when a source file is newer than
it, with the stack's Go environment.

``./dev run`` and ``./dev test`` call it once the virtualenv exists, so the front is
built by the same rules (caches under the stack's cache, no cgo, no workspace) as the
Go services of the stack: :func:`~streamwal_lab.stack.gobuild.go_environment`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from streamwal_lab.stack.gobuild import go_environment
from streamwal_lab.stack.paths import StackPaths

__all__ = ["build_front", "main"]


def _stale(out: Path, source: Path) -> bool:
    if not out.exists():
        return True
    built = out.stat().st_mtime
    return any(f.stat().st_mtime > built for f in source.rglob("*") if f.is_file())


def build_front(source: Path, out: Path) -> bool:
    """Build the front into ``out`` if it is missing or older than a file of ``source``;
    whether it built. :class:`FileNotFoundError` naming Go when there is none."""
    if not _stale(out, source):
        return False
    go = shutil.which("go")
    if go is None:
        raise FileNotFoundError("go is needed to build the node's native front (front/)")
    print(f"==> building the node's native front ({source.name}/, Go) into {out}", file=sys.stderr)
    subprocess.run(
        [go, "build", "-trimpath", "-o", str(out.resolve()), "."],
        cwd=source,
        env=go_environment(StackPaths.default()),
        check=True,
    )
    return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m streamwal_lab.stack.front_build SOURCE OUT", file=sys.stderr)
        return 2
    try:
        build_front(Path(args[0]), Path(args[1]))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"error: go build failed (exit code {exc.returncode})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
