"""Build the wheel as a user would, install it into a fresh virtualenv, try it.

``./dev test`` runs this after the suite. It builds an sdist and, from it, a wheel
with the standard frontend (``python -m build``), checks that the wheel installs
``streamwal`` and nothing else at the top level and ships ``py.typed`` and the
generated gRPC modules, installs it with no extra into a new virtualenv and runs
``streamwal --help`` and a script that opens a channel on the in-process backend
through the public API (the library needs no extra), checks that ``streamwal serve``
names the extra it lacks, then adds the ``node`` extra and runs ``streamwal serve
--help``; all from a folder outside the repository. Prints the wheel's size, the
install times and the top-level names.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = (
    "streamwal/py.typed",
    "streamwal/tso/proto/tso_pb2.py",
    "streamwal/tso/proto/tso_pb2_grpc.py",
    "streamwal/node/proto/streaming_pb2.py",
    "streamwal/node/proto/streaming_pb2_grpc.py",
    "streamwal/adaptors/pulsar/__init__.py",
    "streamwal/adaptors/testing.py",
)

SMOKE = """
import asyncio

import streamwal
from streamwal.adaptors.memory import MemoryOpener
from streamwal.tso import MemoryStore


async def main() -> None:
    opener = MemoryOpener()
    config = streamwal.TsoConfig()
    async with streamwal.InProcessTSO(config, store=MemoryStore()) as tso:
        async with await streamwal.open_wal(opener, "smoke", tso.allocator(), 1) as wal:
            sent = await wal.append(streamwal.MutableMessage(streamwal.MessageType.INSERT, b"hi"))
        async with await streamwal.open_read_only(opener, "smoke") as reader:
            policy = streamwal.DeliveryPolicy.start_from(sent.message_id)
            scanner = await reader.read(policy)
            first = await anext(scanner)
            await scanner.close()
    assert (first.type, first.payload) == (streamwal.MessageType.INSERT, b"hi"), first
    print("opened, appended, read back:", first.message_id, "with streamwal", streamwal.__version__)


asyncio.run(main())
"""


def run(cmd: list[str], cwd: Path) -> str:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.stdout.write(out.stdout)
        sys.stderr.write(out.stderr)
        raise SystemExit(f"failed ({out.returncode}): {' '.join(cmd)}")
    return out.stdout


def top_level_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    missing = [r for r in REQUIRED if r not in names]
    if missing:
        raise SystemExit(f"the wheel lacks {missing}")
    return sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")})


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="streamwal-wheel-") as tmp_name:
        tmp = Path(tmp_name)
        run([sys.executable, "-m", "build", "--outdir", str(tmp / "dist"), str(ROOT)], tmp)
        (wheel,) = (tmp / "dist").glob("streamwal-*.whl")
        tops = top_level_names(wheel)
        if tops != ["streamwal"]:
            raise SystemExit(f"the wheel installs {tops}, not only streamwal")

        env = tmp / "venv"
        venv.create(env, with_pip=True)
        py = env / "bin" / "python"
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        started = time.perf_counter()
        run([*pip, str(wheel)], tmp)
        core_s = time.perf_counter() - started

        exe = env / "bin" / "streamwal"
        run([str(exe), "--help"], tmp)
        version = run([str(exe), "--version"], tmp).strip()
        (tmp / "smoke.py").write_text(SMOKE)
        print(run([str(py), "smoke.py"], tmp).strip())
        refused = subprocess.run(
            [str(exe), "serve", "--help"], cwd=tmp, capture_output=True, text=True, check=False
        )
        if refused.returncode != 2 or "pip install 'streamwal[node]'" not in refused.stderr:
            raise SystemExit(f"serve without the node extra: {refused.stderr or refused.stdout}")

        started = time.perf_counter()
        run([*pip, f"{wheel}[node]"], tmp)
        node_s = time.perf_counter() - started
        run([str(exe), "serve", "--help"], tmp)

        print(
            f"wheel check passed: {wheel.name}, {wheel.stat().st_size / 1024:.0f} KiB; "
            f"installed into a fresh venv in {core_s:.1f} s, "
            f"the node extra in {node_s:.1f} s more; "
            f"top-level names: {', '.join(tops)}; {version}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
