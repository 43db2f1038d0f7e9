"""Built jaeger-ui assets for a Jaeger that has none, and telling a real UI from the placeholder.

jaeger-ui is published neither to npm nor beside the Go module, so the stack cannot
fetch it by itself; a person who has the built assets (a folder with ``index.html``,
or an archive of one: ``.tar.gz``, ``.tgz``, ``.tar``, ``.zip``) names them in
``STREAMWAL_JAEGER_UI_ASSETS`` and Jaeger serves them (``jaeger_query.ui.assets_path``).
An archive is unpacked once into the cache, keyed by its digest, so a changed archive
is unpacked again and an unchanged one is not.

Whether a running Jaeger serves the real UI is read from what it serves at ``/``:
the Go build's placeholder page says it is one.
"""

from __future__ import annotations

import hashlib
import tarfile
import urllib.request
import zipfile
from pathlib import Path

from streamwal_lab.stack.artifacts import cached_folder
from streamwal_lab.stack.paths import StackPaths

__all__ = ["UiAssetsError", "is_placeholder", "ui_assets_folder", "ui_is_real"]

#: words of the page a Jaeger without UI assets serves at ``/``
_PLACEHOLDER_MARKS = (b"This is a placeholder for the Jaeger UI", b"not the Jaeger UI you are")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
_INDEX = "index.html"


class UiAssetsError(ValueError):
    """The assets setting names nothing usable; the message says what was expected."""


def ui_assets_folder(setting: str, paths: StackPaths) -> Path:
    """The folder to give ``ui.assets_path``: the setting itself, or its unpacked archive.

    The folder is the shallowest one holding ``index.html`` (an archive usually wraps
    the assets in a folder or two). Raises :class:`UiAssetsError`.
    """
    source = Path(setting).expanduser().resolve()
    if source.is_dir():
        return _index_folder(source, setting)
    if not source.is_file():
        raise UiAssetsError(f"UI assets {setting!r}: no such folder or archive")
    if not source.name.lower().endswith(_ARCHIVE_SUFFIXES):
        raise UiAssetsError(
            f"UI assets {setting!r}: expected a folder or a {'/'.join(_ARCHIVE_SUFFIXES)} archive"
        )
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    unpacked = cached_folder(
        paths.artifact("jaeger-ui", digest),
        lambda tmp: _unpack(source, tmp / "assets"),
        done="assets",
    )
    return _index_folder(unpacked / "assets", setting)


def _unpack(archive: Path, dest: Path) -> None:
    dest.mkdir()
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zipped:
                for name in zipped.namelist():  # refuse paths that leave the folder
                    if not (dest / name).resolve().is_relative_to(dest.resolve()):
                        raise UiAssetsError(f"{archive.name}: {name!r} points outside it")
                zipped.extractall(dest)
        else:
            with tarfile.open(archive) as tar:
                tar.extractall(dest, filter="data")  # no links out, no devices
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise UiAssetsError(f"UI assets {archive}: cannot unpack ({exc})") from exc


def _index_folder(root: Path, setting: str) -> Path:
    if (root / _INDEX).is_file():
        return root
    found = sorted(root.rglob(_INDEX), key=lambda p: (len(p.parts), str(p)))
    if not found:
        raise UiAssetsError(f"UI assets {setting!r}: no {_INDEX} in it (built jaeger-ui expected)")
    shallowest = [p for p in found if len(p.parts) == len(found[0].parts)]
    if len(shallowest) > 1:
        raise UiAssetsError(
            f"UI assets {setting!r}: several {_INDEX} at one depth "
            f"({', '.join(str(p.parent.relative_to(root)) for p in shallowest)}); name one folder"
        )
    return found[0].parent


def is_placeholder(page: bytes) -> bool:
    """Whether ``page`` is the placeholder a Jaeger without UI assets serves."""
    return any(mark in page for mark in _PLACEHOLDER_MARKS)


def ui_is_real(jaeger_url: str, timeout: float = 3.0) -> bool | None:
    """``True`` when Jaeger serves a UI at ``/``, ``False`` for the placeholder, ``None``
    when it does not answer. Blocking."""
    try:
        with urllib.request.urlopen(f"{jaeger_url.rstrip('/')}/", timeout=timeout) as response:
            return not is_placeholder(response.read())
    except (OSError, ValueError):
        return None
