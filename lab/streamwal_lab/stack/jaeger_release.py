"""Jaeger's official release archive: the same binary as the Go build, with the UI built in.

A Jaeger built from its Go module carries no UI assets and serves a placeholder page
at ``/``. The release archives on GitHub carry the UI, so where they can be
downloaded the stack prefers them. The archive is trusted only after its SHA-256
matches the line for it in the checksum file published beside it
(``jaeger-<version>.sha256sum.txt``, ``shasum -b -a 256`` format); an archive that
does not match is refused and nothing of it is kept.

Blocking (urllib); the stack runs it in its install thread. Like the rest of the
stack it does not import ``wal``: its errors are :class:`ReleaseError`\\ s.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from streamwal_lab.stack.artifacts import cached_folder
from streamwal_lab.stack.paths import StackPaths
from streamwal_lab.stack.service import Progress

__all__ = [
    "JAEGER_RELEASE",
    "ChecksumMismatchError",
    "ReleaseError",
    "ReleaseUnavailableError",
    "archive_name",
    "checksum_name",
    "install_release",
    "parse_checksums",
    "release_binary",
    "release_platform",
]

#: the v2 release built from the same commit as the Go module's v1.76.0 tag; GitHub
#: files both under the ``v1.76.0`` release
JAEGER_RELEASE = "2.13.0"

_CHUNK = 1 << 16


class ReleaseError(RuntimeError):
    """The release could not be installed; the stack falls back to the Go build."""


class ReleaseUnavailableError(ReleaseError):
    """The release could not be downloaded (no network, no such file, no platform build)."""


class ChecksumMismatchError(ReleaseError):
    """The archive is not the one the checksum file names: refused, nothing kept."""


def release_platform() -> str | None:
    """This machine in Jaeger's archive names (``linux-amd64``...), ``None`` if none fits."""
    system = platform.system().lower()
    machine = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    if system not in {"linux", "darwin"} or machine is None:
        return None
    return f"{system}-{machine}"


def archive_name(version: str, platform_name: str) -> str:
    return f"jaeger-{version}-{platform_name}.tar.gz"


def checksum_name(version: str) -> str:
    return f"jaeger-{version}.sha256sum.txt"


def release_binary(paths: StackPaths, version: str = JAEGER_RELEASE) -> Path:
    """Where an installed release's ``jaeger`` binary is (it may not be there)."""
    return paths.artifact(f"jaeger-release-{version}", "bin", "jaeger")


def parse_checksums(text: str) -> dict[str, str]:
    """``file name -> sha256`` from ``<hex> *<name>`` (or ``<hex>  <name>``) lines."""
    found = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 64:
            continue
        found[parts[1].strip().lstrip("*")] = parts[0].lower()
    return found


def install_release(
    base_url: str,
    paths: StackPaths,
    progress: Progress,
    *,
    version: str = JAEGER_RELEASE,
    platform_name: str | None = None,
    timeout: float = 30.0,
) -> Path:
    """Download, verify and unpack the release's ``jaeger`` binary; returns its path.

    ``base_url`` is the folder holding the archive and its checksum file. Raises
    :class:`ReleaseUnavailableError` when either cannot be had and
    :class:`ChecksumMismatchError` when the archive's digest differs.
    """
    target = platform_name or release_platform()
    if target is None:
        raise ReleaseUnavailableError(f"Jaeger publishes no release for {platform.platform()}")
    archive = archive_name(version, target)
    binary = release_binary(paths, version)
    if binary.is_file():
        return binary

    def fill(folder: Path) -> None:
        base = base_url.rstrip("/")
        sums = parse_checksums(_download_text(f"{base}/{checksum_name(version)}", timeout))
        expected = sums.get(archive)
        if expected is None:
            raise ReleaseUnavailableError(f"{checksum_name(version)} lists no {archive}")
        progress(f"jaeger: downloading the {version} release ({archive})")
        with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
            local = Path(scratch) / archive
            actual = _download(f"{base}/{archive}", local, timeout)
            if actual != expected:
                raise ChecksumMismatchError(
                    f"{archive}: SHA-256 {actual} differs from the published {expected}; "
                    "refused (a damaged or altered download)"
                )
            _unpack_binary(local, f"jaeger-{version}-{target}/jaeger", folder / "bin" / "jaeger")
        progress(f"jaeger: release {version} verified (SHA-256 {expected[:16]}...) -> {binary}")

    cached_folder(binary.parent.parent, fill, done="bin/jaeger")
    return binary


def _download_text(url: str, timeout: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bytes(response.read()).decode("utf-8", errors="replace")
    except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts
        raise ReleaseUnavailableError(f"GET {url}: {exc}") from exc


def _download(url: str, dest: Path, timeout: float) -> str:
    """Save ``url`` to ``dest``; returns the SHA-256 of what was saved."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(dest, "wb") as out:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except (OSError, ValueError) as exc:
        raise ReleaseUnavailableError(f"GET {url}: {exc}") from exc
    return digest.hexdigest()


def _unpack_binary(archive: Path, member: str, dest: Path) -> None:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            entry = tar.getmember(member)
            source = tar.extractfile(entry) if entry.isfile() else None
            if source is None:
                raise ReleaseUnavailableError(f"{archive.name}: {member} is not a file")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with source, open(dest, "wb") as out:
                shutil.copyfileobj(source, out)
    except (KeyError, tarfile.TarError) as exc:
        raise ReleaseUnavailableError(f"{archive.name}: no {member} in it ({exc})") from exc
    dest.chmod(0o755)
