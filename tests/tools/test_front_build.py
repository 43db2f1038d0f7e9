"""``./dev``'s build of the native front: built when missing or older than its source,
left alone otherwise, and a missing Go named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamwal_lab.stack import front_build


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "front"
    (source / "sub").mkdir(parents=True)
    (source / "main.go").write_text("package main\n")
    (source / "sub" / "x.go").write_text("package sub\n")
    return source


def test_built_only_when_missing_or_older_than_a_source_file(tmp_path: Path) -> None:
    source, out = _source(tmp_path), tmp_path / "bin" / "streamwal-front"
    assert front_build._stale(out, source)
    out.parent.mkdir()
    out.write_bytes(b"binary")
    os.utime(source / "main.go", (1_000, 1_000))
    os.utime(source / "sub" / "x.go", (1_000, 1_000))
    assert not front_build._stale(out, source)
    os.utime(source / "sub" / "x.go", (out.stat().st_mtime + 5,) * 2)  # a file deep inside
    assert front_build._stale(out, source)


def test_a_missing_go_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="go is needed"):
        front_build.build_front(_source(tmp_path), tmp_path / "out")
    assert front_build.main([str(_source(tmp_path / "again")), str(tmp_path / "out")]) == 1
    assert front_build.main([]) == 2
