"""A folder in the shared cache, filled once and trusted only when complete.

Anything the stack installs (a Go build, a downloaded release, unpacked UI assets) is
made in a private temporary folder beside its destination and renamed into place
only when it is whole, so an interrupted install never leaves a half-written folder a
later run would trust. A file lock serialises two processes filling the same folder;
the second finds it done and returns.
"""

from __future__ import annotations

import fcntl
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cached_folder"]


def cached_folder(final: Path, fill: Callable[[Path], None], *, done: str) -> Path:
    """``final``, made by ``fill(tmp)`` the first time; returns at once when
    ``final / done`` exists.

    ``fill`` gets the empty temporary folder and must leave ``done`` in it; whatever it
    raises is raised here, and the temporary folder is removed. A ``final`` folder
    without ``done`` (left by an older, broken install) is replaced.
    """
    if (final / done).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.parent / f".{final.name}.lock"):
        if (final / done).exists():  # another process made it while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            fill(tmp)
            if not (tmp / done).exists():
                raise FileNotFoundError(f"{final.name}: the install left no {done}")
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
