"""Jaeger's release archive: downloaded, checked against its published checksum, or refused.

A local HTTP server plays GitHub's release folder and serves a prepared archive laid
out as Jaeger packs its own (``jaeger-<v>-<platform>/jaeger``) beside a checksum file
in ``shasum -b -a 256`` format. Each test installs into a private cache.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamwal_lab.stack.jaeger import JaegerService
from streamwal_lab.stack.jaeger_release import (
    JAEGER_RELEASE,
    ChecksumMismatchError,
    ReleaseUnavailableError,
    archive_name,
    checksum_name,
    install_release,
    parse_checksums,
    release_binary,
)
from streamwal_lab.stack.paths import StackPaths

PLATFORM = "linux-amd64"
BINARY = b"#!/bin/sh\necho 'jaeger from the release'\n"


def _archive(binary: bytes = BINARY) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in (("jaeger", binary), ("example-hotrod", b"hotrod")):
            info = tarfile.TarInfo(f"jaeger-{JAEGER_RELEASE}-{PLATFORM}/{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def release_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over HTTP on a free loopback port, and its URL."""
    folder = tmp_path / "served"
    folder.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _publish(folder: Path, archive: bytes, listed_digest: str | None = None) -> None:
    name = archive_name(JAEGER_RELEASE, PLATFORM)
    (folder / name).write_bytes(archive)
    digest = listed_digest or hashlib.sha256(archive).hexdigest()
    other = "0" * 64  # a line for another file must not be taken for ours
    (folder / checksum_name(JAEGER_RELEASE)).write_text(
        f"{other} *jaeger-{JAEGER_RELEASE}-darwin-arm64.tar.gz\n{digest} *{name}\n"
    )


def _paths(tmp_path: Path) -> StackPaths:
    return StackPaths(cache=tmp_path / "cache", stack=tmp_path / "cache" / "stacks" / "t")


def _artifacts(paths: StackPaths) -> list[str]:
    folder = paths.artifact()
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_a_verified_release_is_installed(tmp_path: Path, release_folder: tuple[Path, str]) -> None:
    folder, url = release_folder
    _publish(folder, _archive())
    paths = _paths(tmp_path)
    said: list[str] = []
    binary = install_release(url, paths, said.append, platform_name=PLATFORM)
    assert binary == release_binary(paths)
    assert binary.read_bytes() == BINARY and binary.stat().st_mode & 0o111
    assert any("verified" in line for line in said), said
    # the service now runs the release, whose UI is built in
    jaeger = JaegerService(paths, release_url="off", ui_assets="")
    assert jaeger.binary == binary and "UI built in" in jaeger.ui_source()
    # only the artifact is left behind (no scratch folder; the lock file is kept)
    assert [n for n in _artifacts(paths) if not n.endswith(".lock")] == [binary.parents[1].name]


def test_an_archive_with_another_checksum_is_refused(
    tmp_path: Path, release_folder: tuple[Path, str]
) -> None:
    folder, url = release_folder
    _publish(folder, _archive(b"#!/bin/sh\necho altered\n"), hashlib.sha256(_archive()).hexdigest())
    paths = _paths(tmp_path)
    with pytest.raises(ChecksumMismatchError, match="differs from the published"):
        install_release(url, paths, lambda _: None, platform_name=PLATFORM)
    assert not release_binary(paths).exists()
    assert [n for n in _artifacts(paths) if not n.endswith(".lock")] == []


def test_no_checksum_file_or_no_line_for_the_archive_is_unavailable(
    tmp_path: Path, release_folder: tuple[Path, str]
) -> None:
    folder, url = release_folder
    paths = _paths(tmp_path)
    with pytest.raises(ReleaseUnavailableError, match="404"):
        install_release(url, paths, lambda _: None, platform_name=PLATFORM)
    _publish(folder, _archive())
    with pytest.raises(ReleaseUnavailableError, match="lists no"):
        install_release(url, paths, lambda _: None, platform_name="plan9-mips")
    assert not release_binary(paths).exists()


def test_the_service_falls_back_to_the_go_build_when_the_release_is_refused(
    tmp_path: Path, release_folder: tuple[Path, str]
) -> None:
    folder, url = release_folder
    _publish(folder, _archive(), "f" * 64)
    paths = _paths(tmp_path)
    jaeger = JaegerService(paths, release_url=url, ui_assets="")
    jaeger.go_binary.parent.mkdir(parents=True)
    jaeger.go_binary.write_text("go build stands in here")  # so the fallback builds nothing
    said: list[str] = []
    jaeger.install(said.append)
    assert jaeger.binary == jaeger.go_binary
    assert not release_binary(paths).exists()
    assert any("using the Go build" in line and "differs" in line for line in said), said
    assert "placeholder" in jaeger.ui_source()


def test_checksum_lines_in_both_shasum_formats() -> None:
    a, b = "a" * 64, "B" * 64
    text = f"{a} *one.tar.gz\n{b}  two.tar.gz\nnot a line\n"
    assert parse_checksums(text) == {"one.tar.gz": a, "two.tar.gz": b.lower()}
