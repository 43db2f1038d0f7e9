"""``STREAMWAL_JAEGER_UI_ASSETS``: a folder or archive of built jaeger-ui that Jaeger serves.

The unit tests resolve the setting to a folder; the integration test starts a private
Jaeger (the stack's binary, on free ports, beside the shared one, which it never
touches) and reads what it serves at ``/``.
"""

from __future__ import annotations

import asyncio
import io
import signal
import subprocess
import tarfile
import urllib.request
import uuid
import zipfile
from pathlib import Path

import pytest

from streamwal_lab.stack import StackInfo, StackPaths
from streamwal_lab.stack.jaeger import JAEGER_VERSION, JaegerService
from streamwal_lab.stack.jaeger_release import release_binary
from streamwal_lab.stack.jaeger_ui import (
    UiAssetsError,
    is_placeholder,
    ui_assets_folder,
    ui_is_real,
)
from streamwal_lab.stack.process import die_with_parent
from tests.node.processes import free_port


def _index(marker: str) -> str:
    # jaeger-ui's index.html carries the base tag Jaeger rewrites; keep it like that
    return f'<!doctype html><html><head><base href="/" /></head><body>{marker}</body></html>'


def _tar_gz(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _private_paths(tmp_path: Path) -> StackPaths:
    return StackPaths(cache=tmp_path / "cache", stack=tmp_path / "stack")


def test_a_folder_is_used_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "ui").mkdir()
    (tmp_path / "ui" / "index.html").write_text(_index("x"))
    assert ui_assets_folder(str(tmp_path / "ui"), _private_paths(tmp_path)) == tmp_path / "ui"


def test_an_archive_is_unpacked_once_and_its_index_found(tmp_path: Path) -> None:
    archive = tmp_path / "assets.tar.gz"
    archive.write_bytes(_tar_gz({"build/index.html": _index("tar"), "build/static/a.js": "1"}))
    paths = _private_paths(tmp_path)
    folder = ui_assets_folder(str(archive), paths)
    assert folder.name == "build" and "tar" in (folder / "index.html").read_text()
    assert (folder / "static" / "a.js").is_file()
    assert ui_assets_folder(str(archive), paths) == folder  # cached by the archive's digest
    zipped = tmp_path / "assets.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("ui/index.html", _index("zip"))
    assert "zip" in (ui_assets_folder(str(zipped), paths) / "index.html").read_text()


@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({"build/app.js": "1"}, "no index.html"),
        ({"a/index.html": "1", "b/index.html": "2"}, "several index.html"),
    ],
)
def test_assets_without_one_index_are_refused(
    tmp_path: Path, files: dict[str, str], error: str
) -> None:
    archive = tmp_path / "assets.tgz"
    archive.write_bytes(_tar_gz(files))
    with pytest.raises(UiAssetsError, match=error):
        ui_assets_folder(str(archive), _private_paths(tmp_path))


def test_a_zip_reaching_outside_its_folder_is_refused(tmp_path: Path) -> None:
    zipped = tmp_path / "evil.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("../../outside.html", "x")
    with pytest.raises(UiAssetsError, match="outside"):
        ui_assets_folder(str(zipped), _private_paths(tmp_path))
    assert not (tmp_path / "outside.html").exists()


def test_a_missing_or_unknown_setting_is_refused(tmp_path: Path) -> None:
    paths = _private_paths(tmp_path)
    with pytest.raises(UiAssetsError, match="no such folder"):
        ui_assets_folder(str(tmp_path / "nothing"), paths)
    (tmp_path / "ui.txt").write_text("x")
    with pytest.raises(UiAssetsError, match="expected a folder"):
        ui_assets_folder(str(tmp_path / "ui.txt"), paths)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return bytes(response.read())


async def _serving(tmp_path: Path, ui_assets: str) -> tuple[JaegerService, subprocess.Popen[bytes]]:
    """A private Jaeger (the stack's binary, its own ports and folders), once it answers.

    Its cache is private too, with the stack's installed Jaegers linked in, so the
    archives it unpacks stay in ``tmp_path``.
    """
    shared = StackPaths.default()
    paths = _private_paths(tmp_path)
    paths.artifact().mkdir(parents=True)
    for name in (f"jaeger-{JAEGER_VERSION}", release_binary(shared).parents[1].name):
        if shared.artifact(name).is_dir():
            paths.artifact(name).symlink_to(shared.artifact(name))
    ports = {
        n: free_port() for n in ("otlp_grpc", "otlp_http", "query_http", "query_grpc", "health")
    }
    jaeger = JaegerService(paths, ports=ports, ui_assets=ui_assets, release_url="off")
    assert jaeger.binary.is_file(), "the stack's Jaeger is not installed"
    jaeger.prepare()
    log = open(tmp_path / "jaeger.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [*die_with_parent(), *jaeger.command()], stdout=log, stderr=subprocess.STDOUT
    )
    log.close()
    for _ in range(120):
        if await jaeger.probe():
            return jaeger, proc
        assert proc.poll() is None, (tmp_path / "jaeger.log").read_text()[-2000:]
        await asyncio.sleep(0.25)
    proc.kill()
    raise AssertionError("the private Jaeger did not answer in 30 s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.integration
async def test_jaeger_serves_the_given_index_at_the_root(
    telemetry_stack: StackInfo, tmp_path: Path
) -> None:
    marker = f"streamwal-ui-{uuid.uuid4().hex}"
    archive = tmp_path / "jaeger-ui.tar.gz"
    archive.write_bytes(_tar_gz({"packages/build/index.html": _index(marker)}))
    jaeger, proc = await _serving(tmp_path, str(archive))
    try:
        page = await asyncio.to_thread(_get, f"{jaeger.url}/")
        deep = await asyncio.to_thread(_get, f"{jaeger.url}/trace/{'ab' * 16}")  # UI routes
        real = await asyncio.to_thread(ui_is_real, jaeger.url)
    finally:
        _stop(proc)
    assert marker.encode() in page and not is_placeholder(page)
    assert marker.encode() in deep
    assert real is True
    assert f"assets {archive}" == jaeger.ui_source()


@pytest.mark.integration
async def test_without_assets_the_go_build_serves_its_placeholder(
    telemetry_stack: StackInfo, tmp_path: Path
) -> None:
    """The other side of the test above: the marker there came from the setting."""
    jaeger, proc = await _serving(tmp_path, "")
    try:
        page = await asyncio.to_thread(_get, f"{jaeger.url}/")
    finally:
        _stop(proc)
    built_in = release_binary(jaeger.paths).is_file()
    assert is_placeholder(page) is not built_in, page[:300]


def test_a_bad_setting_is_a_prerequisite_problem_before_anything_starts(tmp_path: Path) -> None:
    jaeger = JaegerService(
        _private_paths(tmp_path), ui_assets=str(tmp_path / "nothing"), release_url="off"
    )
    (problem, *_) = jaeger.prerequisites()
    assert "no such folder or archive" in problem and "STREAMWAL_JAEGER_UI_ASSETS" in problem
